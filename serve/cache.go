package serve

import "encoding/json"

// byteCache keeps answers by key, the oldest dropped once their bytes
// exceed a bound.
type byteCache struct {
	max   int
	bytes int
	m     map[string]json.RawMessage
	order []string
}

type cacheEntry struct {
	Key  string          `json:"key"`
	Body json.RawMessage `json:"body"`
}

func newByteCache(max int) *byteCache { return &byteCache{max: max, m: map[string]json.RawMessage{}} }

func (c *byteCache) get(key string) (json.RawMessage, bool) {
	b, ok := c.m[key]
	return b, ok
}

// put keeps body under key; a body larger than the bound is not kept.
func (c *byteCache) put(key string, body json.RawMessage) {
	if key == "" || len(body)+len(key) > c.max {
		return
	}
	if old, ok := c.m[key]; ok {
		c.bytes -= len(old) + len(key)
	} else {
		c.order = append(c.order, key)
	}
	c.m[key] = body
	c.bytes += len(body) + len(key)
	for c.bytes > c.max && len(c.order) > 0 {
		k := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.m[k]) + len(k)
		delete(c.m, k)
	}
}

func (c *byteCache) entries() []cacheEntry {
	out := make([]cacheEntry, 0, len(c.order))
	for _, k := range c.order {
		out = append(out, cacheEntry{Key: k, Body: c.m[k]})
	}
	return out
}

// doneGroups keeps the answers of scored groups by group key, the oldest
// dropped beyond a count.
type doneGroups struct {
	max   int
	m     map[string]*groupAnswer
	order []string
}

type doneEntry struct {
	Key    string      `json:"key"`
	Answer groupAnswer `json:"answer"`
}

func newDoneGroups(max int) *doneGroups { return &doneGroups{max: max, m: map[string]*groupAnswer{}} }

func (d *doneGroups) get(key string) (*groupAnswer, bool) {
	a, ok := d.m[key]
	return a, ok
}

func (d *doneGroups) put(key string, a *groupAnswer) {
	if _, ok := d.m[key]; !ok {
		d.order = append(d.order, key)
	}
	d.m[key] = a
	for len(d.order) > d.max {
		delete(d.m, d.order[0])
		d.order = d.order[1:]
	}
}

func (d *doneGroups) entries() []doneEntry {
	out := make([]doneEntry, 0, len(d.order))
	for _, k := range d.order {
		out = append(out, doneEntry{Key: k, Answer: *d.m[k]})
	}
	return out
}
