package corpus

// Symbols is the number of symbols bytes are folded to.
const Symbols = 96

// Fold maps a byte to one of Symbols symbols:
//
//	'\n'                                → 0
//	' ' … '~' (0x20–0x7E, printable)     → 1 … 95 (b − 31)
//	'\t', '\r', '\v', '\f'               → the symbol of ' ' (1)
//	other control bytes, DEL, ≥ 0x80     → the symbol of '~' (95)
//
// Every byte maps to exactly one symbol, so the number of symbols equals the
// number of bytes and a loss in bits per symbol is a loss in bits per byte.
// The Opticks text is ASCII apart from 107 lines with accented letters; Go
// source loses its tabs (indentation becomes spaces) and folds non-ASCII
// bytes in comments and strings onto '~', its rarest printable character.
func Fold(b byte) byte {
	switch {
	case b == '\n':
		return 0
	case b >= 0x20 && b <= 0x7E:
		return b - 31
	case b == '\t' || b == '\r' || b == '\v' || b == '\f':
		return ' ' - 31
	default:
		return '~' - 31
	}
}

// Unfold returns the byte a symbol stands for (the inverse of Fold on
// '\n' and printable ASCII). It panics when s ≥ Symbols.
func Unfold(s byte) byte {
	switch {
	case s == 0:
		return '\n'
	case s < Symbols:
		return s + 31
	}
	panic("corpus: Unfold: symbol out of range")
}

// FoldBytes returns the folded symbols of p in a new slice.
func FoldBytes(p []byte) []byte {
	out := make([]byte, len(p))
	for i, b := range p {
		out[i] = Fold(b)
	}
	return out
}

// UnfoldBytes returns the text that symbols stand for, in a new slice.
func UnfoldBytes(sym []byte) []byte {
	out := make([]byte, len(sym))
	for i, s := range sym {
		out[i] = Unfold(s)
	}
	return out
}
