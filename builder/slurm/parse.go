package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// JobInfo is what a poll learns about a Slurm job.
type JobInfo struct {
	ID     string
	State  string // base state, e.g. "RUNNING", "FAILED" (flags and suffixes removed)
	Reason string // e.g. "NonZeroExitCode", "None"
	// ExitCode and Signal are from "ExitCode=<code>:<signal>"; HasExit
	// says whether the poll reported them (squeue does not).
	ExitCode, Signal int
	HasExit          bool
	RunTime          time.Duration // elapsed run time, when known
}

// ParseSbatch parses the stdout of `sbatch --parsable`: "<job id>" or
// "<job id>;<cluster>" on the last non-empty line. It returns the job ID.
func ParseSbatch(out string) (string, error) {
	var last string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	if last == "" {
		return "", fmt.Errorf("%w: sbatch printed no job ID", ErrParse)
	}
	id, _, _ := strings.Cut(last, ";")
	if !validJobID(id) {
		return "", fmt.Errorf("%w: sbatch printed %q, want a job ID", ErrParse, last)
	}
	return id, nil
}

// validJobID accepts plain numeric job IDs (array and het-job forms such as
// "12_3" or "12+1" are never produced by a plain sbatch).
func validJobID(id string) bool {
	if id == "" || len(id) > 20 {
		return false
	}
	for _, r := range id {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// ParseScontrolJob parses one line of `scontrol show job -o <id>`: space-
// separated Key=Value fields, where a value may itself hold spaces (a
// token without "=" continues the previous value). It needs JobId and
// JobState.
func ParseScontrolJob(out string) (JobInfo, error) {
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i] // one job; -o prints one line per job
	}
	fields := map[string]string{}
	var last string
	for _, tok := range strings.Fields(line) {
		k, v, ok := strings.Cut(tok, "=")
		if ok && isKey(k) {
			if _, dup := fields[k]; !dup {
				fields[k] = v
				last = k
				continue
			}
		}
		if last != "" {
			fields[last] += " " + tok
		}
	}
	info := JobInfo{ID: fields["JobId"], Reason: fields["Reason"]}
	if !validJobID(info.ID) {
		return JobInfo{}, fmt.Errorf("%w: scontrol: no valid JobId in %.80q", ErrParse, line)
	}
	st, err := baseState(fields["JobState"])
	if err != nil {
		return JobInfo{}, fmt.Errorf("scontrol: job %s: %w", info.ID, err)
	}
	info.State = st
	if ec, ok := fields["ExitCode"]; ok {
		c, s, err := parseExitCode(ec)
		if err != nil {
			return JobInfo{}, fmt.Errorf("scontrol: job %s: %w", info.ID, err)
		}
		info.ExitCode, info.Signal, info.HasExit = c, s, true
	}
	if rt, ok := fields["RunTime"]; ok {
		d, err := ParseDuration(rt)
		if err != nil {
			return JobInfo{}, fmt.Errorf("scontrol: job %s: %w", info.ID, err)
		}
		info.RunTime = d
	}
	return info, nil
}

func isKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("_/:", r) {
			return false
		}
	}
	return unicode.IsUpper(rune(k[0]))
}

// baseState returns the state name without flags or suffixes ("CANCELLED
// by 0", "CANCELLED+", "COMPLETING,...").
func baseState(s string) (string, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " +,"); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "", fmt.Errorf("%w: empty job state", ErrParse)
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && r != '_' {
			return "", fmt.Errorf("%w: job state %q", ErrParse, s)
		}
	}
	return s, nil
}

func parseExitCode(s string) (code, sig int, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return 0, 0, fmt.Errorf("%w: exit code %q, want <code>:<signal>", ErrParse, s)
	}
	code, err1 := strconv.Atoi(a)
	sig, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || code < 0 || code > 255 || sig < 0 || sig > 255 {
		return 0, 0, fmt.Errorf("%w: exit code %q", ErrParse, s)
	}
	return code, sig, nil
}

// ParseDuration parses Slurm's elapsed-time format: [days-]hours:minutes:
// seconds, minutes:seconds, or "INVALID"/"UNLIMITED"/"" (zero).
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "INVALID", "UNLIMITED", "NONE", "N/A":
		return 0, nil
	}
	days := 0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 1e6 {
			return 0, fmt.Errorf("%w: duration %q", ErrParse, s)
		}
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, fmt.Errorf("%w: duration %q", ErrParse, s)
	}
	total := 0
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || (i > 0 && n > 59) || n > 1e6 {
			return 0, fmt.Errorf("%w: duration %q", ErrParse, s)
		}
		total = total*60 + n
	}
	if len(parts) == 2 && days > 0 {
		return 0, fmt.Errorf("%w: duration %q", ErrParse, s)
	}
	return time.Duration(days)*24*time.Hour + time.Duration(total)*time.Second, nil
}

// SqueueFormat is the output format ParseSqueue reads:
// job ID, state, reason and elapsed time separated by "|".
const SqueueFormat = "%i|%T|%r|%M"

// ParseSqueue parses the output of `squeue -h -t all -j <id> -o
// SqueueFormat`. squeue reports no exit code (HasExit is false).
func ParseSqueue(out string) (JobInfo, error) {
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	parts := strings.Split(line, "|")
	if len(parts) != 4 {
		return JobInfo{}, fmt.Errorf("%w: squeue line %.80q, want 4 fields", ErrParse, line)
	}
	info := JobInfo{ID: strings.TrimSpace(parts[0]), Reason: strings.TrimSpace(parts[2])}
	if !validJobID(info.ID) {
		return JobInfo{}, fmt.Errorf("%w: squeue job ID %q", ErrParse, info.ID)
	}
	st, err := baseState(parts[1])
	if err != nil {
		return JobInfo{}, fmt.Errorf("squeue: job %s: %w", info.ID, err)
	}
	info.State = st
	d, err := ParseDuration(parts[3])
	if err != nil {
		return JobInfo{}, fmt.Errorf("squeue: job %s: %w", info.ID, err)
	}
	info.RunTime = d
	return info, nil
}
