package records_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

// Benchmarks of the record stores. Run them with
//
//	go test -run '^$' -bench . -benchtime 2s ./records/
//
// records/s counts records appended, scanned or loaded per second; B/record
// is the store file's size divided by its records.

const benchScanN = 100_000

// benchRecord is fixture record i with one of 1000 (task, proposal key)
// pairs, k = i mod 1000.
func benchRecord(i int) records.Record {
	r := storetest.Record(i)
	k := i % 1000
	r.Task = storetest.Tasks[k%len(storetest.Tasks)]
	r.Loss = r.Task.RefLoss - r.Gain
	r.Proposal.Mechanism = "lr-scale"
	r.Proposal.Params = map[string]string{"factor": strconv.Itoa(k), "schedule": "cosine"}
	return r
}

var bench struct {
	once sync.Once
	dir  string
	path string // a store of benchScanN records
	err  error
}

// benchStore returns the path of a store of benchScanN records, written
// once per test binary and removed by TestMain.
func benchStore(b *testing.B) string {
	bench.once.Do(func() {
		bench.dir, bench.err = os.MkdirTemp("", "records-bench")
		if bench.err != nil {
			return
		}
		bench.path = filepath.Join(bench.dir, "scan.jsonl")
		s, err := records.OpenFile(bench.path, records.DefaultFileConfig())
		if err != nil {
			bench.err = err
			return
		}
		for i := 0; i < benchScanN && err == nil; i += 1000 {
			batch := make([]records.Record, 1000)
			for j := range batch {
				batch[j] = benchRecord(i + j)
			}
			err = s.Append(context.Background(), batch...)
		}
		bench.err = errors.Join(err, s.Close())
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.path
}

func removeBenchStore() {
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
	}
}

func reportSize(b *testing.B, path string, n int) {
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/float64(n), "B/record")
}

func benchAppend(b *testing.B, batch int) {
	path := filepath.Join(b.TempDir(), "append.jsonl")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rs := make([]records.Record, batch)
	for i := range rs {
		rs[i] = benchRecord(i)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := s.Append(ctx, rs...); err != nil {
			b.Fatal(err)
		}
	}
	n := b.N * batch
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	reportSize(b, path, n)
}

// BenchmarkFileStoreAppend appends one record per call; each call fsyncs.
func BenchmarkFileStoreAppend(b *testing.B) { benchAppend(b, 1) }

// BenchmarkFileStoreAppendBatch100 appends 100 records per call (one
// write and one fsync per call).
func BenchmarkFileStoreAppendBatch100(b *testing.B) { benchAppend(b, 100) }

// BenchmarkFileStoreAppendParallel appends one record per call from
// GOMAXPROCS goroutines; calls are serialised.
func BenchmarkFileStoreAppendParallel(b *testing.B) {
	path := filepath.Join(b.TempDir(), "append.jsonl")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.RunParallel(func(pb *testing.PB) {
		r := benchRecord(1)
		for pb.Next() {
			if err := s.Append(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	reportSize(b, path, b.N)
}

func BenchmarkMemStoreAppend(b *testing.B) {
	s := records.NewMemStore()
	r := benchRecord(1)
	for b.Loop() {
		if err := s.Append(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkFileStoreOpen loads a store of 10⁵ records (read, checksum,
// decode, validate, index).
func BenchmarkFileStoreOpen(b *testing.B) {
	path := benchStore(b)
	b.ResetTimer()
	for b.Loop() {
		s, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		if s.Len() != benchScanN {
			b.Fatalf("%d records, want %d", s.Len(), benchScanN)
		}
		s.Close()
	}
	b.ReportMetric(float64(b.N*benchScanN)/b.Elapsed().Seconds(), "records/s")
	reportSize(b, path, benchScanN)
}

func benchScan(b *testing.B, f func(i int) records.Filter, want int) {
	s, err := records.OpenFile(benchStore(b), records.FileConfig{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	got, i := 0, 0
	b.ResetTimer()
	for b.Loop() {
		rs, err := s.Scan(ctx, f(i))
		if err != nil {
			b.Fatal(err)
		}
		if len(rs) != want {
			b.Fatalf("Scan returned %d records, want %d", len(rs), want)
		}
		got += len(rs)
		i++
	}
	b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "records/s")
	reportSize(b, s.Path(), benchScanN)
}

// BenchmarkFileStoreScan returns all 10⁵ records (copies) per call.
func BenchmarkFileStoreScan(b *testing.B) {
	benchScan(b, func(int) records.Filter { return records.Filter{} }, benchScanN)
}

// BenchmarkFileStoreScanKey looks up one proposal key (100 of the 10⁵
// records) per call, through the key index.
func BenchmarkFileStoreScanKey(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = benchRecord(i).Proposal.Key()
	}
	benchScan(b, func(i int) records.Filter { return records.Filter{Key: keys[i%len(keys)]} }, benchScanN/1000)
}

// BenchmarkFileStoreScanTaskKey looks up a task and key, as Seen does.
func BenchmarkFileStoreScanTaskKey(b *testing.B) {
	fs := make([]records.Filter, 1000)
	for i := range fs {
		r := benchRecord(i)
		fs[i] = records.Filter{TaskID: r.Task.ID, Key: r.Proposal.Key()}
	}
	benchScan(b, func(i int) records.Filter { return fs[i%len(fs)] }, benchScanN/1000)
}
