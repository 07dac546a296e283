package oaichat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lm2lm/lm2lm/internal/jsonkeys"
)

// Errors of answer reading. The backends wrap them in their own
// bad-answer errors.
var (
	// ErrNoObject: the answer holds no valid JSON object.
	ErrNoObject = errors.New("no JSON object")
	// ErrNotOneObject: a JSON-mode answer is not exactly one JSON object,
	// or a text answer holds more than one.
	ErrNotOneObject = errors.New("not exactly one JSON object")
	// ErrDuplicateKey: an object repeats a key (which encoding/json would
	// resolve silently to the last value).
	ErrDuplicateKey = errors.New("duplicate key")
)

// OnlyJSONObject returns the answer of a server in a JSON mode (a JSON
// schema or JSON object response format): s, without surrounding white
// space, must be exactly one JSON object with no repeated key at any depth.
// Anything else (prose, a second object, a code fence) is an error wrapping
// ErrNotOneObject or ErrDuplicateKey.
func OnlyJSONObject(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return "", fmt.Errorf("%w: empty answer", ErrNoObject)
	}
	if !strings.HasPrefix(t, "{") || !json.Valid([]byte(t)) {
		if _, err := OneJSONObject(t); errors.Is(err, ErrNoObject) {
			return "", err
		}
		return "", fmt.Errorf("%w: the answer is not a JSON object alone", ErrNotOneObject)
	}
	if err := NoDuplicateKeys(t); err != nil {
		return "", err
	}
	return t, nil
}

// OneJSONObject returns the JSON object of a free-text answer: exactly one
// balanced, valid JSON object may appear in s (objects nested in it are
// part of it; prose and code fences around it are ignored), with no repeated
// key at any depth. No object is ErrNoObject; a second one (an echo of
// injected data, an example) is ErrNotOneObject: the text does not say
// which is the answer. It scans at most MaxJSONInput bytes (a longer answer
// is ErrNotOneObject) and bounds its work to a fixed multiple of that.
func OneJSONObject(s string) (string, error) {
	if len(s) > MaxJSONInput {
		return "", fmt.Errorf("%w: answer of %d bytes, more than %d", ErrNotOneObject, len(s), MaxJSONInput)
	}
	objs, err := jsonObjects(s, 2)
	if err != nil {
		return "", err
	}
	switch len(objs) {
	case 0:
		return "", fmt.Errorf("%w: no balanced, valid JSON object", ErrNoObject)
	case 1:
		if err := NoDuplicateKeys(objs[0]); err != nil {
			return "", err
		}
		return objs[0], nil
	default:
		return "", fmt.Errorf("%w: the answer holds more than one JSON object", ErrNotOneObject)
	}
}

// jsonObjects returns up to max of the outermost valid JSON objects of s,
// in order.
func jsonObjects(s string, max int) ([]string, error) {
	var out []string
	work, budget := 0, 16*len(s)+1<<16
	for start := strings.IndexByte(s, '{'); start >= 0; {
		end, ok, cost := balancedCost(s, start)
		work += cost
		if work > budget {
			return nil, fmt.Errorf("%w: too many unbalanced braces to read the answer", ErrNotOneObject)
		}
		next := start + 1
		if ok && json.Valid([]byte(s[start:end])) {
			out = append(out, s[start:end])
			if len(out) >= max {
				return out, nil
			}
			next = end
		}
		i := strings.IndexByte(s[next:], '{')
		if i < 0 {
			break
		}
		start = next + i
	}
	return out, nil
}

// balancedCost is balanced with the number of bytes it looked at.
func balancedCost(s string, i int) (int, bool, int) {
	end, ok := balanced(s, i)
	if ok {
		return end, true, end - i
	}
	return 0, false, len(s) - i
}

// NoDuplicateKeys reports, wrapping ErrDuplicateKey, the first key that an
// object of the JSON text js repeats, at any depth (jsonkeys.Repeated, keys
// compared byte for byte); js must be valid JSON.
func NoDuplicateKeys(js string) error {
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber()
	k, rep, err := jsonkeys.Repeated(dec, false)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v", ErrNoObject, err)
	case rep:
		return fmt.Errorf("%w %q", ErrDuplicateKey, Truncate(k, 40))
	}
	return nil
}
