package records

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"time"
	"unicode/utf8"
)

// The file format is documented on FileStore.

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// lineHeader is the length of "<crc> ".
const lineHeader = 9

// errLine* describe why a line does not decode; they are wrapped in a
// *CorruptError by the reader.
var (
	errLineShort    = errors.New("line too short")
	errLineChecksum = errors.New("checksum mismatch")
	errLineFormat   = errors.New("malformed line")
)

// encodeLine appends the line of r as the i-th of n records of one batch
// to dst, including its trailing '\n'. r must have passed checkStorable.
func encodeLine(dst []byte, r Record, i, n int) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return dst, fmt.Errorf("%w: record %s/%s: %v", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), err)
	}
	start := len(dst)
	dst = append(dst, "00000000 "...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, ' ')
	dst = append(dst, js...)
	sum := crc32.Checksum(dst[start+lineHeader:], crcTable)
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	hex.Encode(dst[start:start+8], b[:])
	return append(dst, '\n'), nil
}

// decodeLine decodes one line (without its trailing '\n'). It returns the
// record and its place i of n in its batch. A record that decodes but fails
// validation is an error wrapping ErrInvalid.
func decodeLine(line []byte) (r Record, i, n int, err error) {
	if len(line) < lineHeader+len("1/1 {}") {
		return Record{}, 0, 0, errLineShort
	}
	if line[8] != ' ' {
		return Record{}, 0, 0, fmt.Errorf("%w: no space after checksum", errLineFormat)
	}
	var want uint32
	for _, c := range line[:8] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return Record{}, 0, 0, fmt.Errorf("%w: checksum %q is not lower-case hex", errLineFormat, line[:8])
		}
		want = want<<4 | uint32(d)
	}
	payload := line[lineHeader:]
	if got := crc32.Checksum(payload, crcTable); got != want {
		return Record{}, 0, 0, fmt.Errorf("%w: stored %08x, computed %08x", errLineChecksum, want, got)
	}
	sp := bytes.IndexByte(payload, ' ')
	if sp < 0 {
		return Record{}, 0, 0, fmt.Errorf("%w: no batch position", errLineFormat)
	}
	pos := payload[:sp]
	slash := bytes.IndexByte(pos, '/')
	if slash < 0 {
		return Record{}, 0, 0, fmt.Errorf("%w: batch position %q", errLineFormat, Excerpt(string(pos)))
	}
	i, ok1 := parsePositive(pos[:slash])
	n, ok2 := parsePositive(pos[slash+1:])
	if !ok1 || !ok2 || i > n {
		return Record{}, 0, 0, fmt.Errorf("%w: batch position %q", errLineFormat, Excerpt(string(pos)))
	}
	if err := json.Unmarshal(payload[sp+1:], &r); err != nil {
		return Record{}, 0, 0, fmt.Errorf("%w: json: %v", errLineFormat, err)
	}
	if err := checkStorable(r); err != nil {
		return Record{}, 0, 0, err
	}
	return r, i, n, nil
}

// parsePositive parses a decimal integer in [1, 1<<31) without sign or
// leading zeros.
func parsePositive(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 || b[0] == '0' {
		return 0, false
	}
	var v int64 // not int: 10 digits overflow a 32-bit int
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return int(v), v < 1<<31
}

// Storable reports, wrapping ErrInvalid, why a Store would reject r: the
// checks of Record.Validate plus those that let a store give r back exactly
// as it was appended (valid UTF-8 strings, a time RFC 3339 can hold).
// Executors call it before paying for a run whose record they must keep.
func Storable(r Record) error { return checkStorable(r) }

// checkStorable is Record.Validate plus what a store needs to give a record
// back exactly as it was appended: every string valid UTF-8 (encoding/json
// would replace invalid bytes) and a time that RFC 3339 can represent.
func checkStorable(r Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	strs := []string{r.Task.ID, r.Task.Family, r.Task.Description, r.Proposal.Mechanism, r.Proposal.Text, r.Infeasible,
		r.Failure, r.Log, r.LogFile, r.Version}
	for k, v := range r.Proposal.Params {
		strs = append(strs, k, v)
	}
	if r.Code != nil {
		strs = append(strs, r.Code.Digest, r.Code.Overlay, r.Code.Diff, r.Code.Builder)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: record %s/%s: string %q is not valid UTF-8", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), Excerpt(s))
		}
	}
	if y := r.Time.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("%w: record %s/%s: time %s outside years 0-9999", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), r.Time.Format(time.RFC3339))
	}
	if _, off := r.Time.Zone(); off%60 != 0 {
		return fmt.Errorf("%w: record %s/%s: time zone offset %ds is not whole minutes", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), off)
	}
	return nil
}

// cloneRecord returns a deep copy of r in the form a store keeps: the
// monotonic clock reading is stripped (as any encoding does) and empty maps
// and slices become nil (as encoding/json's omitempty does).
func cloneRecord(r Record) Record {
	if len(r.Proposal.Params) == 0 {
		r.Proposal.Params = nil
	} else {
		m := make(map[string]string, len(r.Proposal.Params))
		for k, v := range r.Proposal.Params {
			m[k] = v
		}
		r.Proposal.Params = m
	}
	if len(r.Seeds) == 0 {
		r.Seeds = nil
	} else {
		r.Seeds = append([]uint64(nil), r.Seeds...)
	}
	if r.Code != nil {
		c := *r.Code
		r.Code = &c
	}
	r.Time = r.Time.Round(0)
	return r
}

// minLineBytes is the smallest FileConfig.MaxLineBytes: room for a record
// with short fields.
const minLineBytes = 1 << 10

// tornFragment reports why frag, the bytes after the last '\n' of a store
// file, cannot be what an interrupted Append left; nil means it can, and is
// a torn tail. An interrupted Append leaves a prefix of its line
// "<crc> <i>/<n> <json>": frag must fit that grammar as far as it goes, its
// position (when complete) must continue the batch being read (have lines
// of a batch of haveN read so far), its JSON must start as a record's does,
// hold no raw control byte, and not end before frag does (bytes after a
// complete record are not a torn write). A fragment of NUL bytes alone is
// also torn: some file systems leave them after a crash in a region that
// was allocated but never written, and dropping them drops no record.
func tornFragment(frag []byte, have, haveN int) error {
	if len(bytes.Trim(frag, "\x00")) == 0 {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: unterminated last line %s, not a torn write", errLineFormat, why)
	}
	for k := 0; k < len(frag) && k < 8; k++ {
		if c := frag[k]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return bad("does not start with a checksum")
		}
	}
	if len(frag) <= 8 {
		return nil
	}
	if frag[8] != ' ' {
		return bad("has no space after its checksum")
	}
	rest := frag[lineHeader:]
	pos, js, whole := bytes.Cut(rest, []byte{' '})
	if len(pos) > 21 || bytes.Count(pos, []byte{'/'}) > 1 || bytes.ContainsFunc(pos, func(r rune) bool { return r != '/' && (r < '0' || r > '9') }) {
		return bad("has a malformed batch position")
	}
	if !whole {
		return nil
	}
	si, sn, ok := bytes.Cut(pos, []byte{'/'})
	i, ok1 := parsePositive(si)
	n, ok2 := parsePositive(sn)
	if !ok || !ok1 || !ok2 || i > n {
		return bad("has a malformed batch position")
	}
	if err := batchOrder(i, n, have, haveN); err != nil {
		return err
	}
	const head = `{"task":`
	if m := min(len(js), len(head)); string(js[:m]) != head[:m] {
		return bad("does not hold a record")
	}
	if end, closed := objectEnd(js); closed && end != len(js) {
		return bad("has bytes after its record")
	}
	if bytes.ContainsFunc(js, func(r rune) bool { return r < ' ' }) {
		return bad("holds a control character")
	}
	return nil
}

// objectEnd returns the end of the JSON object that opens s, skipping braces
// inside strings, and whether it closes within s.
func objectEnd(s []byte) (int, bool) {
	depth, inStr, esc := 0, false, false
	for j, c := range s {
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr:
			inStr = c != '"'
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}
