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
		return dst, fmt.Errorf("%w: record %s/%s: %v", ErrInvalid, r.Task.ID, r.Proposal.Key(), err)
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
		return Record{}, 0, 0, fmt.Errorf("%w: batch position %q", errLineFormat, pos)
	}
	i, ok1 := parsePositive(pos[:slash])
	n, ok2 := parsePositive(pos[slash+1:])
	if !ok1 || !ok2 || i > n {
		return Record{}, 0, 0, fmt.Errorf("%w: batch position %q", errLineFormat, pos)
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
	strs := []string{r.Task.ID, r.Task.Family, r.Task.Description, r.Proposal.Mechanism, r.Proposal.Text, r.Infeasible}
	for k, v := range r.Proposal.Params {
		strs = append(strs, k, v)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: record %s/%s: string %q is not valid UTF-8", ErrInvalid, r.Task.ID, r.Proposal.Key(), s)
		}
	}
	if y := r.Time.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("%w: record %s/%s: time %s outside years 0-9999", ErrInvalid, r.Task.ID, r.Proposal.Key(), r.Time.Format(time.RFC3339))
	}
	if _, off := r.Time.Zone(); off%60 != 0 {
		return fmt.Errorf("%w: record %s/%s: time zone offset %ds is not whole minutes", ErrInvalid, r.Task.ID, r.Proposal.Key(), off)
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
	r.Time = r.Time.Round(0)
	return r
}
