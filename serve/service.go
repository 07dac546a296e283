package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/records"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Service is the LM2LM environment service: a loop.Loop driven by
// requests of an outside RL trainer. It hands out research states as chat
// prompts, assembles each group of completions from however the trainer
// sends it (whole, per sample, split across processes), scores it with the
// world model, follows the trainer's step, runs the calibration points in
// the background through the Executor, evaluates proposals on held-out
// states with real runs, and keeps its state durable in Config.Dir. Its
// methods are safe for concurrent use; Handler serves them over HTTP.
//
// A Service owns goroutines (a calibration's runs, the deadline of each
// group being assembled); Close stops them and waits.
type Service struct {
	cfg Config
	c   Components
	met *metrics

	admit   chan struct{} // MaxInFlight slots
	predict chan struct{} // Parallel world-model calls
	lock    *os.File      // the exclusive lock on Dir

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	bg     sync.WaitGroup // the goroutines Close waits for

	mu       sync.Mutex // guards everything below
	closed   bool
	loop     *loop.Loop
	j        *journal
	states   map[string]stateEntry // issued states by id
	order    map[string][]string   // issued state ids by split, oldest first
	issued   int                   // states issued so far
	testDraw int                   // held-out draws so far
	requests int                   // score requests applied (CountSteps)
	scored   int                   // groups scored
	failed   int                   // groups answered with a failure
	cache    *byteCache            // states and evaluate answers
	pending  map[string]chan struct{}
	reqs     *byteCache // request id -> digest of its body
	asm      map[string]*assembly
	done     *doneGroups
	cal      *calRun             // the calibration in flight
	cals     []CalibrationStatus // every calibration point started
	mon      *MonitorsResponse   // the last applied calibration's monitors
	evalRuns int
	evalCost records.Cost
	// ckptBusy is set while a checkpoint is written off the lock,
	// ckptAgain when another was asked for meanwhile; ckptErr is the last
	// checkpoint's failure (Health reports it) and ckptRetry, after one,
	// the journal's size at which the next is tried.
	ckptBusy  bool
	ckptAgain bool
	ckptErr   error
	ckptRetry int64
}

// stateEntry is one issued state.
type stateEntry struct {
	ID    string        `json:"id"`
	State records.State `json:"state"`
	Split string        `json:"split"`
}

// Split names.
const (
	SplitTrain = "train"
	SplitTest  = "test"
)

// snapshot is the body of the service's checkpoint file.
type snapshot struct {
	Loop         json.RawMessage     `json:"loop"` // the loop's checkpoint (JSON)
	JournalSeq   uint64              `json:"journal_seq"`
	States       []stateEntry        `json:"states"`
	Issued       int                 `json:"issued"`
	TestDraw     int                 `json:"test_draws"`
	Requests     int                 `json:"requests"`
	Scored       int                 `json:"scored_groups"`
	Failed       int                 `json:"failed_groups"`
	Cache        []cacheEntry        `json:"cache,omitempty"`
	RequestIDs   []cacheEntry        `json:"request_ids,omitempty"`
	Done         []doneEntry         `json:"done,omitempty"`
	Calibrations []CalibrationStatus `json:"calibrations,omitempty"`
	Monitors     *MonitorsResponse   `json:"monitors,omitempty"`
	EvalRuns     int                 `json:"eval_runs,omitempty"`
	EvalCost     records.Cost        `json:"eval_cost"`
}

// envelope is the checkpoint file: the format, the SHA-256 of the body and
// the body.
type envelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

const snapshotFormat = "lm2lm-serve/state/v2"

// New returns a service over c, resuming from Config.Dir when it holds a
// checkpoint: the checkpoint is restored and the journal replayed (no
// world-model call, no run), and a calibration that was in flight goes on
// in the background (an idempotent executor serves its finished runs from
// its store without paying). It takes an exclusive lock on Dir (ErrLocked
// when another service holds it).
func New(cfg Config, c Components) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c.World == nil {
		return nil, fmt.Errorf("%w: World is required", ErrConfig)
	}
	if cfg.Calibration != loop.Static && (c.Builder == nil || c.Executor == nil) {
		return nil, fmt.Errorf("%w: Builder and Executor are required unless calibration is static", ErrConfig)
	}
	for _, t := range c.HeldOut {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: held-out task: %w", ErrConfig, err)
		}
	}
	l, err := loop.New(cfg.loopConfig(), loop.Setup{Tasks: c.Tasks, Evidence: c.Evidence})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, c: c, loop: l, states: map[string]stateEntry{}, order: map[string][]string{},
		cache: newByteCache(cfg.CacheBytes), reqs: newByteCache(cfg.CacheBytes), pending: map[string]chan struct{}{},
		asm: map[string]*assembly{}, done: newDoneGroups(cfg.MaxDoneGroups),
		admit: make(chan struct{}, cfg.MaxInFlight), predict: make(chan struct{}, cfg.Parallel), lock: lock}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.met = newMetrics()
	if err := s.load(); err != nil {
		lock.Close()
		return nil, err
	}
	s.mu.Lock()
	s.startDue()
	s.mu.Unlock()
	s.met.update(s)
	return s, nil
}

// LockDir takes the exclusive lock a Service holds on its state directory
// (creating the directory), or fails with ErrLocked; release gives it back.
func LockDir(dir string) (release func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	f, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	return f.Close, nil
}

// CheckDir reports whether dir can be locked now (ErrLocked when another
// service holds it), without keeping the lock: a command checks it before
// long preparations; New takes the lock for good.
func CheckDir(dir string) error {
	release, err := LockDir(dir)
	if err != nil {
		return err
	}
	return release()
}

// lockDir takes an exclusive, non-blocking lock on dir's lock file.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
	}
	return f, nil
}

func (s *Service) snapshotPath() string { return filepath.Join(s.cfg.Dir, "checkpoint.json") }
func (s *Service) journalPath() string  { return filepath.Join(s.cfg.Dir, "journal.log") }

// load restores the checkpoint and replays the journal.
func (s *Service) load() error {
	var after uint64
	b, err := os.ReadFile(s.snapshotPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("%w: %w", ErrState, err)
	default:
		sn, err := decodeSnapshot(b)
		if err != nil {
			return err
		}
		if err := s.restore(sn); err != nil {
			return err
		}
		after = sn.JournalSeq
	}
	j, err := readJournal(s.journalPath(), after, func(seq uint64, payload []byte) error {
		var o op
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return err
		}
		_, err := s.apply(o)
		return err
	})
	if err != nil {
		return err
	}
	if j.seq < after {
		j.seq = after
	}
	if j.dropped > 0 && s.cfg.Log != nil {
		s.cfg.Log.Warn("serve: the journal's final entry was cut short (a write a crash interrupted, never acknowledged); dropped it",
			"path", s.journalPath(), "offset", j.size, "bytes_dropped", j.dropped)
	}
	s.j = j
	return nil
}

// decodeSnapshot checks and decodes a checkpoint file.
func decodeSnapshot(b []byte) (snapshot, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return snapshot{}, fmt.Errorf("%w: checkpoint: %s", ErrState, records.Excerpt(err.Error()))
	}
	if env.Format != snapshotFormat {
		return snapshot{}, fmt.Errorf("%w: checkpoint format %q, want %q", ErrState, records.Excerpt(env.Format), snapshotFormat)
	}
	sum := sha256.Sum256(env.Body)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return snapshot{}, fmt.Errorf("%w: checkpoint checksum mismatch", ErrState)
	}
	var sn snapshot
	if err := json.Unmarshal(env.Body, &sn); err != nil {
		return snapshot{}, fmt.Errorf("%w: checkpoint: %s", ErrState, records.Excerpt(err.Error()))
	}
	return sn, nil
}

// restore installs a decoded checkpoint.
func (s *Service) restore(sn snapshot) error {
	if err := s.loop.Restore(sn.Loop, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	for _, e := range sn.States {
		s.addState(e)
	}
	s.issued, s.testDraw, s.requests, s.scored, s.failed = sn.Issued, sn.TestDraw, sn.Requests, sn.Scored, sn.Failed
	s.evalRuns, s.evalCost, s.cals, s.mon = sn.EvalRuns, sn.EvalCost, sn.Calibrations, sn.Monitors
	for _, e := range sn.Cache {
		s.cache.put(e.Key, e.Body)
	}
	for _, e := range sn.RequestIDs {
		s.reqs.put(e.Key, e.Body)
	}
	for _, e := range sn.Done {
		a := e.Answer
		s.done.put(e.Key, &a)
	}
	return nil
}

// A checkpoint is a compaction of the journal, never the only record of a
// change: every change is journalled and synced before it is applied, so
// the checkpoint may be written at any moment from a copy of the state,
// off the lock. Under the lock it takes the copy (the loop's Snapshot and
// the service's tables, by reference: what they hold is never changed in
// place) and moves the journal's entries aside (journal.rotate), so that
// the checkpoint covers exactly the entries set aside; scoring waits for
// nothing more, and that hold is apart from the change (a calibration
// joining M) that asked for the checkpoint. Off the lock the copy is encoded, written to a temporary
// file, synced and renamed over the checkpoint, and only then are the
// entries set aside removed. A kill at any point leaves a checkpoint and
// journal files that replay to every change acknowledged.

// ckptCopy is a checkpoint's content as taken under mu.
type ckptCopy struct {
	loop *loop.Snapshot
	snap snapshot // without Loop, which loop encodes
}

// checkpoint has a checkpoint written: at once, or when the one being
// written is done. Its copy of the state is taken in a hold of the lock of
// its own, apart from the change that asked for it, and its failure fails
// no request (the journal keeps every entry): it is logged and reported by
// Health. The caller holds mu.
func (s *Service) checkpoint() {
	if s.ckptBusy {
		s.ckptAgain = true
		return
	}
	s.ckptBusy = true
	s.goBG(s.writeCheckpoints)
}

// checkpointFailed records a checkpoint's failure; the next is tried once
// the journal has grown by another SnapshotBytes (or after the next
// calibration). The caller holds mu.
func (s *Service) checkpointFailed(err error) {
	s.ckptErr = fmt.Errorf("%w: checkpoint: %w", ErrState, err)
	s.ckptRetry = s.j.size + s.cfg.SnapshotBytes
	if s.cfg.Log != nil {
		s.cfg.Log.Error("serve: checkpoint failed; the journal keeps every entry", "err", err)
	}
}

// capture copies the state and sets the journal's entries aside. The
// caller holds mu.
func (s *Service) capture() (*ckptCopy, error) {
	t0 := time.Now()
	defer func() { s.met.checkpointCopy(time.Since(t0).Seconds()) }()
	ls, err := s.loop.Snapshot(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	sn := snapshot{JournalSeq: s.j.seq, Issued: s.issued, TestDraw: s.testDraw, Requests: s.requests,
		Scored: s.scored, Failed: s.failed, Calibrations: slices.Clone(s.cals), Monitors: s.mon, EvalRuns: s.evalRuns,
		EvalCost: s.evalCost, Cache: s.cache.entries(), RequestIDs: s.reqs.entries(), Done: s.done.entries()}
	sn.States = make([]stateEntry, 0, len(s.states))
	for _, split := range slices.Sorted(maps.Keys(s.order)) {
		for _, id := range s.order[split] {
			sn.States = append(sn.States, s.states[id])
		}
	}
	if err := s.j.rotate(); err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	return &ckptCopy{loop: ls, snap: sn}, nil
}

// writeCheckpoints copies the state under the lock and writes the copy
// off it, then again while another checkpoint was asked for meanwhile.
func (s *Service) writeCheckpoints() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for again := true; again && !s.closed; {
		c, err := s.capture()
		if err == nil {
			s.mu.Unlock()
			err = s.writeCheckpoint(c)
			if err == nil {
				_ = testHook("checkpoint-before-drop")
				// The checkpoint covers every entry set aside (a restart
				// skips them); the journal goes on after them.
				err = s.j.dropAside()
			}
			s.mu.Lock()
		}
		if err != nil {
			s.checkpointFailed(err)
		} else {
			s.j.aside, s.ckptErr, s.ckptRetry = false, nil, 0
		}
		again, s.ckptAgain = s.ckptAgain, false
	}
	s.ckptBusy = false
}

// writeCheckpoint writes c atomically. The checkpoint is streamed to its
// file, its large lists an element at a time and the body hashed as it
// goes, so that a checkpoint of tens of megabytes never sits whole in
// memory. Its sum follows the body (JSON keys are unordered).
func (s *Service) writeCheckpoint(c *ckptCopy) error {
	lb, err := c.loop.Encode()
	if err != nil {
		return err
	}
	c.snap.Loop = lb
	return writeAtomicFunc(s.snapshotPath(), func(w io.Writer) error {
		if _, err := fmt.Fprintf(w, `{"format":%q,"body":`, snapshotFormat); err != nil {
			return err
		}
		h := sha256.New()
		if err := writeSnapshotBody(io.MultiWriter(w, h), &c.snap); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, `,"sha256":%q}`, hex.EncodeToString(h.Sum(nil)))
		return err
	})
}

// writeSnapshotBody writes a snapshot's JSON (the fields of type snapshot)
// to w, its long lists an element at a time.
func writeSnapshotBody(w io.Writer, sn *snapshot) error {
	sw := &jsonWriter{w: w}
	sw.raw(`{"loop":`)
	sw.raw(string(sn.Loop))
	sw.field("journal_seq", sn.JournalSeq)
	sw.list("states", len(sn.States), func(i int) any { return sn.States[i] })
	sw.field("issued", sn.Issued)
	sw.field("test_draws", sn.TestDraw)
	sw.field("requests", sn.Requests)
	sw.field("scored_groups", sn.Scored)
	sw.field("failed_groups", sn.Failed)
	sw.list("cache", len(sn.Cache), func(i int) any { return sn.Cache[i] })
	sw.list("request_ids", len(sn.RequestIDs), func(i int) any { return sn.RequestIDs[i] })
	sw.list("done", len(sn.Done), func(i int) any { return sn.Done[i] })
	sw.field("calibrations", sn.Calibrations)
	sw.field("monitors", sn.Monitors)
	sw.field("eval_runs", sn.EvalRuns)
	sw.field("eval_cost", sn.EvalCost)
	sw.raw("}")
	return sw.err
}

// jsonWriter writes JSON to w, keeping the first error.
type jsonWriter struct {
	w   io.Writer
	err error
}

func (j *jsonWriter) raw(s string) {
	if j.err == nil {
		_, j.err = io.WriteString(j.w, s)
	}
}

func (j *jsonWriter) value(v any) {
	if j.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		j.err = err
		return
	}
	_, j.err = j.w.Write(b)
}

func (j *jsonWriter) field(name string, v any) {
	j.raw(`,"` + name + `":`)
	j.value(v)
}

func (j *jsonWriter) list(name string, n int, at func(i int) any) {
	j.raw(`,"` + name + `":[`)
	for i := range n {
		if i > 0 {
			j.raw(",")
		}
		j.value(at(i))
	}
	j.raw("]")
}

// commit journals o durably, then applies it. The caller holds mu.
func (s *Service) commit(o op) (json.RawMessage, error) {
	if s.closed {
		return nil, unavailable("closed", "the service is closing")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // '<' is one byte in the journal, not six
	if err := enc.Encode(o); err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	if err := s.j.append(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})); err != nil {
		return nil, unavailable("state_unwritable", "%s", records.Excerpt(err.Error()))
	}
	resp, err := s.apply(o)
	if err != nil {
		return nil, err
	}
	if s.j.size >= max(s.cfg.SnapshotBytes, s.ckptRetry) {
		s.checkpoint()
	}
	return resp, nil
}

// Close stops the service's goroutines (a calibration's runs are
// abandoned: a restart finishes them from the store), waits for them and
// closes the journal and the lock. The state on disk is complete at every
// moment; Close writes nothing.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, a := range s.asm {
		a.timer.Stop()
	}
	s.mu.Unlock()
	s.cancel()
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.j != nil {
		err = s.j.close()
	}
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// go runs f in a goroutine the service owns (Close waits for it).
func (s *Service) goBG(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// Info is the service's state in brief.
type Info struct {
	API          string `json:"api"`
	Step         int    `json:"step"`
	Scored       int    `json:"scored_groups"`
	Failed       int    `json:"failed_groups"`
	Requests     int    `json:"score_requests"`
	Calibrations int    `json:"calibrations"`
	Evidence     int    `json:"evidence"`
	Candidates   int    `json:"candidates"`
	RealRuns     int    `json:"real_runs"`
	Reused       int    `json:"reused_runs"`
	EvalRuns     int    `json:"eval_runs"`
	Calibrating  bool   `json:"calibrating"`
	Issued       int    `json:"issued_states"`
	Pool         int    `json:"pool_records"`
	// Digest, only when asked for (it serialises the whole loop), is the
	// SHA-256 of the loop's checkpoint without what was paid (cost, runs,
	// reused: a resumed calibration is served its finished runs from the
	// store): equal digests mean equal state.
	Digest string `json:"digest,omitempty"`
}

// Info returns the service's state in brief (no digest).
func (s *Service) Info() Info { return s.info(false) }

// InfoDigest returns Info with its Digest.
func (s *Service) InfoDigest() Info { return s.info(true) }

func (s *Service) info(digest bool) Info {
	s.mu.Lock()
	st := s.loop.Status()
	in := Info{API: APIVersion, Step: st.Step, Scored: s.scored, Failed: s.failed, Requests: s.requests,
		Calibrations: st.Calibrations, Evidence: st.Evidence.Len(), Candidates: st.Candidates,
		RealRuns: st.Runs, Reused: st.Reused, EvalRuns: s.evalRuns, Calibrating: st.Calibrating,
		Issued: len(s.states), Pool: st.Pool.Len()}
	var sn *loop.Snapshot
	if digest {
		// Only the loop's copy holds the lock; encoding and hashing it
		// do not stop scoring.
		sn, _ = s.loop.Snapshot(nil)
	}
	s.mu.Unlock()
	if sn != nil {
		in.Digest = digestOf(sn)
	}
	return in
}

// Health states the service's capacity, so that a client can size its
// concurrency.
type Health struct {
	API              string  `json:"api"`
	OK               bool    `json:"ok"`
	Problem          string  `json:"problem,omitempty"`
	InFlight         int     `json:"in_flight"`
	MaxInFlight      int     `json:"max_in_flight"`
	PendingGroups    int     `json:"pending_groups"`
	MaxPendingGroups int     `json:"max_pending_groups"`
	Parallel         int     `json:"world_model_parallel"`
	GroupSize        int     `json:"default_group_size"`
	GroupDeadline    float64 `json:"group_deadline_seconds"`
	Step             int     `json:"step"`
	Calibrating      bool    `json:"calibrating"`
}

// Health returns the service's capacity and whether it can take work.
func (s *Service) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := Health{API: APIVersion, OK: true, InFlight: len(s.admit), MaxInFlight: s.cfg.MaxInFlight,
		PendingGroups: len(s.asm), MaxPendingGroups: s.cfg.MaxPendingGroups, Parallel: s.cfg.Parallel,
		GroupSize: s.cfg.GroupSize, GroupDeadline: s.cfg.GroupDeadline.Seconds(), Step: s.loop.Status().Step,
		Calibrating: s.loop.Status().Calibrating}
	if s.ckptErr != nil {
		h.Problem = records.Excerpt(s.ckptErr.Error()) // the journal keeps every entry: still OK
	}
	if s.j.broken != nil {
		h.OK, h.Problem = false, records.Excerpt(s.j.broken.Error())
	}
	if s.closed {
		h.OK, h.Problem = false, "closing"
	}
	return h
}

// digestOf is Info.Digest of a loop's snapshot.
func digestOf(sn *loop.Snapshot) string {
	b, err := sn.Encode()
	if err != nil {
		return ""
	}
	var env struct{ Body map[string]any }
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&env); err != nil {
		return ""
	}
	delete(env.Body, "cost")
	delete(env.Body, "runs")
	delete(env.Body, "reused")
	nb, err := json.Marshal(withoutTimings(env.Body)) // map keys sorted
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(nb)
	return hex.EncodeToString(sum[:])
}

// timingKeys are the fields of a checkpoint that measure when or how long
// (a record's time and cost), which two runs of the same requests do not
// share.
var timingKeys = map[string]bool{"time": true, "cost": true, "wall_seconds": true, "device_seconds": true}

// withoutTimings returns v (decoded JSON) with every timing field removed
// at any depth.
func withoutTimings(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if timingKeys[k] {
				delete(x, k)
				continue
			}
			x[k] = withoutTimings(e)
		}
	case []any:
		for i, e := range x {
			x[i] = withoutTimings(e)
		}
	}
	return v
}

// now stamps synthetic records.
func (s *Service) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Time{}
}
