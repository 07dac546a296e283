package records

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func lineRecord() Record {
	return Record{
		Task: Task{ID: "ar-prose/0", Family: "ar-prose", Split: Train, Metric: BitsPerByte,
			RefLoss: 2.125, SeedNoise: 0.0125, Budget: 400, Description: "tiny AR model"},
		Proposal: Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}, Text: "double it"},
		Gain:     0.03125, Loss: 2.09375, Source: Real, Seeds: []uint64{1, 2},
		Cost: Cost{DeviceSeconds: 12.5}, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

func mustLine(t testing.TB, r Record, i, n int) []byte {
	t.Helper()
	l, err := encodeLine(nil, r, i, n)
	require.NoError(t, err)
	return l
}

// withSum returns "<crc32c(payload)> payload" computed here, independently
// of encodeLine.
func withSum(payload string) []byte {
	return []byte(fmt.Sprintf("%08x %s", crc32.Checksum([]byte(payload), crc32.MakeTable(crc32.Castagnoli)), payload))
}

func TestLineFormat(t *testing.T) {
	r := lineRecord()
	l := mustLine(t, r, 2, 3)
	require.Equal(t, byte('\n'), l[len(l)-1])
	require.Equal(t, 1, bytes.Count(l, []byte{'\n'}))
	js := `{"task":{"id":"ar-prose/0","family":"ar-prose","split":"train","metric":"bits-per-byte","ref_loss":2.125,` +
		`"seed_noise":0.0125,"budget":400,"description":"tiny AR model"},"proposal":{"mechanism":"lr-scale",` +
		`"params":{"factor":"2"},"text":"double it"},"gain":0.03125,"loss":2.09375,"source":"real","seeds":[1,2],` +
		`"cost":{"device_seconds":12.5},"time":"2026-03-01T12:00:00Z"}`
	require.Equal(t, string(withSum("2/3 "+js))+"\n", string(l))

	got, i, n, err := decodeLine(l[:len(l)-1])
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 3}, [2]int{i, n})
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecodeLineErrors(t *testing.T) {
	good := mustLine(t, lineRecord(), 1, 1)
	good = good[:len(good)-1]
	payload := string(good[9:])
	js := payload[4:]
	tests := []struct {
		name string
		line []byte
		want error
	}{
		{"empty", nil, errLineShort},
		{"short", good[:12], errLineShort},
		{"bad checksum", append([]byte("0badf00d"), good[8:]...), errLineChecksum},
		{"flipped payload bit", append(append([]byte(nil), good[:50]...), append([]byte{good[50] ^ 1}, good[51:]...)...), errLineChecksum},
		{"upper-case checksum", []byte(strings.ToUpper(string(good[:8])) + string(good[8:])), errLineFormat},
		{"no space", append(append([]byte(nil), good[:8]...), append([]byte{'_'}, good[9:]...)...), errLineFormat},
		{"no position", withSum(js), errLineFormat},
		{"position 0/1", withSum("0/1 " + js), errLineFormat},
		{"position 2/1", withSum("2/1 " + js), errLineFormat},
		{"leading zero", withSum("01/1 " + js), errLineFormat},
		{"signed", withSum("+1/1 " + js), errLineFormat},
		// 9999999999 mod 2^32 = 1410065407 < 2^31: an int32 that wraps
		// would accept it (GOARCH=386).
		{"position past 2^31", withSum("9999999999/9999999999 " + js), errLineFormat},
		{"bad JSON", withSum("1/1 " + js[:len(js)-1]), errLineFormat},
		{"trailing garbage", withSum("1/1 " + js + "x"), errLineFormat},
		{"NaN gain", withSum("1/1 " + strings.Replace(js, `"gain":0.03125`, `"gain":NaN`, 1)), errLineFormat},
		{"overflowing gain", withSum("1/1 " + strings.Replace(js, `"gain":0.03125`, `"gain":1e999`, 1)), errLineFormat},
		{"invalid record", withSum("1/1 " + strings.Replace(js, `"split":"train"`, `"split":"dev"`, 1)), ErrInvalid},
		{"empty mechanism", withSum("1/1 " + strings.Replace(js, `"mechanism":"lr-scale"`, `"mechanism":""`, 1)), ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := decodeLine(tt.line)
			require.ErrorIs(t, err, tt.want)
		})
	}
	_, _, _, err := decodeLine(withSum(payload))
	require.NoError(t, err, "the independent checksum agrees with encodeLine")
}

// canonicalParams is the multiset of canonical (name, value) pairs.
func canonicalParams(p Proposal) []string {
	var out []string
	for k, v := range p.Params {
		out = append(out, CanonicalName(k)+"\x00"+CanonicalValue(v))
	}
	slices.Sort(out)
	return out
}

// TestKeyInjective is a property test of Proposal.Key: two proposals have
// the same key exactly when their canonical forms are equal, even over an
// alphabet full of the key's delimiters.
func TestKeyInjective(t *testing.T) {
	atoms := []string{"a", "A", "b", " ", "=", ",", "{", "}", `"`, `\`, "1", "1.0", "1e0", "-0", "0", ".5", "x\ty"}
	str := rapid.Custom(func(t *rapid.T) string {
		return strings.Join(rapid.SliceOfN(rapid.SampledFrom(atoms), 0, 4).Draw(t, "atoms"), "")
	})
	prop := rapid.Custom(func(t *rapid.T) Proposal {
		return Proposal{
			Mechanism: str.Draw(t, "mechanism"),
			Params:    rapid.MapOfN(str, str, 0, 3).Draw(t, "params"),
		}
	})
	rapid.Check(t, func(t *rapid.T) {
		a, b := prop.Draw(t, "a"), prop.Draw(t, "b")
		sameCanon := CanonicalName(a.Mechanism) == CanonicalName(b.Mechanism) &&
			slices.Equal(canonicalParams(a), canonicalParams(b))
		if sameKey := a.Key() == b.Key(); sameKey != sameCanon {
			t.Fatalf("Key(%#v) = %q, Key(%#v) = %q; canonical forms equal: %v", a, a.Key(), b, b.Key(), sameCanon)
		}
		if a.Key() != a.Key() {
			t.Fatalf("Key(%#v) is not deterministic", a)
		}
	})
}

// TestKeyReformatted: reformatting every part of a proposal (case, white
// space, number notation) never changes its key.
func TestKeyReformatted(t *testing.T) {
	atoms := []string{"a", "b", " ", "=", ",", "{", "}", `"`, "1", "0.25", "x\ty"}
	str := rapid.Custom(func(t *rapid.T) string {
		return strings.Join(rapid.SliceOfN(rapid.SampledFrom(atoms), 1, 4).Draw(t, "atoms"), "")
	})
	// Names (mechanism and parameter names) fold case and white space;
	// values also fold number notation.
	name := func(s string) string { return "  " + strings.ReplaceAll(strings.ToUpper(s), " ", " \t ") + "\n" }
	value := func(s string) string {
		if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			return " " + strconv.FormatFloat(f, 'E', -1, 64)
		}
		return name(s)
	}
	rapid.Check(t, func(t *rapid.T) {
		p := Proposal{Mechanism: str.Draw(t, "mechanism"), Params: rapid.MapOfN(str, str, 0, 3).Draw(t, "params")}
		q := Proposal{Mechanism: name(p.Mechanism), Params: map[string]string{}}
		for k, v := range p.Params {
			q.Params[name(k)] = value(v)
		}
		if len(q.Params) != len(p.Params) {
			t.Skip("two names reformat to one")
		}
		if p.Key() != q.Key() {
			t.Fatalf("Key(%#v) = %q, reformatted Key(%#v) = %q", p, p.Key(), q, q.Key())
		}
	})
}

// TestLineRoundTripProperty: any storable record survives encode/decode.
func TestLineRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := lineRecord()
		r.Proposal.Text = rapid.String().Draw(t, "text")
		r.Task.Description = rapid.StringN(0, 20, -1).Draw(t, "description")
		r.Proposal.Params = rapid.MapOfN(rapid.StringMatching(`[a-z]{1,4}`), rapid.String(), 0, 3).Draw(t, "params")
		r.Gain = rapid.Float64().Draw(t, "gain")
		r.Seeds = rapid.SliceOfN(rapid.Uint64(), 0, 3).Draw(t, "seeds")
		r.Time = time.Unix(rapid.Int64Range(-62135596800, 253402300799).Draw(t, "sec"),
			rapid.Int64Range(0, 999999999).Draw(t, "nsec")).In(time.FixedZone("z", 60*rapid.IntRange(-1439, 1439).Draw(t, "offmin")))
		if err := checkStorable(r); err != nil {
			t.Skip(err) // e.g. a NaN parameter or colliding names
		}
		n := rapid.IntRange(1, 1<<20).Draw(t, "n")
		i := rapid.IntRange(1, n).Draw(t, "i")
		l, err := encodeLine(nil, r, i, n)
		if err != nil {
			t.Fatalf("encodeLine: %v", err)
		}
		got, gi, gn, err := decodeLine(l[:len(l)-1])
		if err != nil {
			t.Fatalf("decodeLine(%q): %v", l, err)
		}
		if gi != i || gn != n {
			t.Fatalf("position %d/%d, want %d/%d", gi, gn, i, n)
		}
		if diff := cmp.Diff(cloneRecord(r), got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

func FuzzDecodeLine(f *testing.F) {
	good := mustLine(f, lineRecord(), 1, 1)
	good = good[:len(good)-1]
	js := string(good[13:])
	f.Add(good)                                                              // valid line
	f.Add(mustLine(f, lineRecord(), 7, 9))                                   // valid, with its newline
	f.Add(good[:len(good)/2])                                                // torn line
	f.Add(append([]byte("deadbeef"), good[8:]...))                           // bad checksum
	f.Add(withSum("1/1 " + js[:len(js)-3]))                                  // bad JSON, good checksum
	f.Add(withSum("1/1 " + strings.Replace(js, "0.03125", "NaN", 1)))        // NaN gain
	f.Add(withSum("1/1 " + strings.Replace(js, `"real"`, `"predicted"`, 1))) // another source
	f.Add(withSum("3/2 " + js))                                              // bad position
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, line []byte) {
		r, i, n, err := decodeLine(line)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decodeLine(%q) accepted an invalid record: %v", line, err)
		}
		if math.IsNaN(r.Gain) || math.IsInf(r.Gain, 0) || math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
			t.Fatalf("decodeLine(%q) accepted a non-finite number", line)
		}
		if i < 1 || i > n {
			t.Fatalf("decodeLine(%q) position %d/%d", line, i, n)
		}
		// What decodes re-encodes to a line that decodes to the same record,
		// and encoding is then a fixed point.
		l1, err := encodeLine(nil, r, i, n)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		r2, i2, n2, err := decodeLine(l1[:len(l1)-1])
		if err != nil || i2 != i || n2 != n {
			t.Fatalf("re-decode %q: %d/%d %v", l1, i2, n2, err)
		}
		if diff := cmp.Diff(r, r2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("re-decode of %q (-first +second):\n%s", line, diff)
		}
		l2, _ := encodeLine(nil, r2, i2, n2)
		if !bytes.Equal(l1, l2) {
			t.Fatalf("encoding is not a fixed point:\n%q\n%q", l1, l2)
		}
	})
}

// FuzzDecodePayload fuzzes what follows the checksum, with a correct
// checksum computed here, so that the position and JSON decoding (not only
// the checksum test) meet arbitrary input.
func FuzzDecodePayload(f *testing.F) {
	good := mustLine(f, lineRecord(), 1, 1)
	payload := string(good[9 : len(good)-1])
	js := payload[4:]
	f.Add(payload)                                                          // valid
	f.Add("2/5 " + js)                                                      // valid, within a batch
	f.Add(payload[:len(payload)/2])                                         // torn
	f.Add("1/1 " + js[:len(js)-3])                                          // bad JSON
	f.Add("1/1 " + strings.Replace(js, "0.03125", "NaN", 1))                // NaN gain
	f.Add("1/1 " + strings.Replace(js, "0.03125", "1e400", 1))              // overflow
	f.Add("1/1 " + strings.Replace(js, `"lr-scale"`, `"  "`, 1))            // empty mechanism
	f.Add("1/1 " + strings.Replace(js, `"2"`, `"inf"`, 1))                  // infinite parameter
	f.Add("1/1 " + strings.Replace(js, `"train"`, `"held-out"`, 1))         // valid, other split
	f.Add("1/1 " + strings.Replace(js, `"seeds":[1,2]`, `"seeds":[-1]`, 1)) // negative seed
	f.Add("0/0 {}")
	f.Fuzz(func(t *testing.T, payload string) {
		line := withSum(payload)
		r, i, n, err := decodeLine(line)
		if err != nil {
			if !errors.Is(err, errLineFormat) && !errors.Is(err, errLineShort) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("decodeLine(%q): unclassified error %v", line, err)
			}
			return
		}
		if err := checkStorable(r); err != nil {
			t.Fatalf("decodeLine(%q) accepted an unstorable record: %v", line, err)
		}
		l, err := encodeLine(nil, r, i, n)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		r2, _, _, err := decodeLine(l[:len(l)-1])
		if err != nil {
			t.Fatalf("re-decode %q: %v", l, err)
		}
		if diff := cmp.Diff(r, r2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("re-decode of %q (-first +second):\n%s", line, diff)
		}
	})
}
