package slurm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/slurm"
)

// Real output of Slurm 22.05 on the CI cluster.
const scontrolFailed = `JobId=1 JobName=t.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T17:43:11 EligibleTime=2026-11-29T17:43:11 AccrueTime=2026-11-29T17:43:11 StartTime=2026-11-29T17:43:12 EndTime=2026-11-29T17:43:12 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T17:43:12 Scheduler=Main Partition=debug AllocNode:Sid=localhost:3599 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=1G,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=1G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/t.sh WorkDir=/tmp StdErr=/tmp/t.out StdIn=/dev/null StdOut=/tmp/t.out Power=
`

func TestParseScontrolJob(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     slurm.JobInfo
	}{
		{"failed", scontrolFailed, slurm.JobInfo{ID: "1", State: "FAILED", Reason: "NonZeroExitCode", ExitCode: 3, HasExit: true}},
		{"running", "JobId=42 JobName=lm2lm JobState=RUNNING Reason=None ExitCode=0:0 RunTime=1-02:03:04",
			slurm.JobInfo{ID: "42", State: "RUNNING", Reason: "None", HasExit: true, RunTime: 26*time.Hour + 3*time.Minute + 4*time.Second}},
		{"cancelled", "JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=00:00:01",
			slurm.JobInfo{ID: "7", State: "CANCELLED", Reason: "None", Signal: 15, HasExit: true, RunTime: time.Second}},
		{"value with spaces", "JobId=8 JobName=my job name JobState=PENDING Reason=Priority Comment=a b=c",
			slurm.JobInfo{ID: "8", State: "PENDING", Reason: "Priority"}},
		{"state with flag", "JobId=9 JobState=CANCELLED+ Reason=None", slurm.JobInfo{ID: "9", State: "CANCELLED", Reason: "None"}},
		{"no exit code", "JobId=10 JobState=PENDING", slurm.JobInfo{ID: "10", State: "PENDING"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := slurm.ParseScontrolJob(c.in)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	for _, bad := range []string{"", "JobState=RUNNING", "JobId=x JobState=RUNNING", "JobId=1", "JobId=1 JobState=running",
		"JobId=1 JobState=RUNNING ExitCode=3", "JobId=1 JobState=RUNNING ExitCode=300:0", "JobId=1 JobState=RUNNING RunTime=1:99:00",
		"slurm_load_jobs error: Invalid job id specified"} {
		_, err := slurm.ParseScontrolJob(bad)
		require.ErrorIs(t, err, slurm.ErrParse, "%q", bad)
	}
}

func TestParseSbatch(t *testing.T) {
	for in, want := range map[string]string{"123\n": "123", "123;cluster\n": "123", "\n  77  \n\n": "77"} {
		got, err := slurm.ParseSbatch(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "\n", "Submitted batch job 12", "12_3", "-1", "123456789012345678901"} {
		_, err := slurm.ParseSbatch(bad)
		require.ErrorIs(t, err, slurm.ErrParse, "%q", bad)
	}
}

func TestParseSqueue(t *testing.T) {
	got, err := slurm.ParseSqueue("1|FAILED|NonZeroExitCode|0:00\n")
	require.NoError(t, err)
	require.Equal(t, slurm.JobInfo{ID: "1", State: "FAILED", Reason: "NonZeroExitCode"}, got)
	got, err = slurm.ParseSqueue("5|RUNNING|None|1:02:03")
	require.NoError(t, err)
	require.Equal(t, time.Hour+2*time.Minute+3*time.Second, got.RunTime)
	for _, bad := range []string{"", "1|FAILED|x", "a|FAILED|x|0:00", "1|failed|x|0:00", "1|FAILED|x|zz"} {
		_, err := slurm.ParseSqueue(bad)
		require.ErrorIs(t, err, slurm.ErrParse, "%q", bad)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"00:00:00": 0, "01:02": 62 * time.Second, "2-00:00:01": 48*time.Hour + time.Second,
		"UNLIMITED": 0, "": 0, "100:00:00": 100 * time.Hour} {
		got, err := slurm.ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"1", "1:2:3:4", "a:00", "00:60", "-1:00", "1-02:03"} {
		_, err := slurm.ParseDuration(bad)
		require.ErrorIs(t, err, slurm.ErrParse, bad)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		state, reason string
		act           slurm.Action
		class         error
		timedOut      bool
	}{
		{"PENDING", "Priority", slurm.Wait, nil, false},
		{"PENDING", "Resources", slurm.Wait, nil, false},
		{"PENDING", "InvalidAccount", slurm.Fail, builder.ErrFailed, false},
		{"RUNNING", "None", slurm.Wait, nil, false},
		{"COMPLETING", "None", slurm.Wait, nil, false},
		{"REQUEUED", "None", slurm.Wait, nil, false},
		{"SUSPENDED", "None", slurm.Wait, nil, false},
		{"SOME_FUTURE_STATE", "None", slurm.Wait, nil, false},
		{"COMPLETED", "None", slurm.ReadResult, nil, false},
		{"FAILED", "NonZeroExitCode", slurm.ReadExit, nil, false},
		{"TIMEOUT", "TimeLimit", slurm.Fail, builder.ErrInfeasible, true},
		{"OUT_OF_MEMORY", "OutOfMemory", slurm.Fail, builder.ErrInfeasible, false},
		{"NODE_FAIL", "None", slurm.Fail, builder.ErrTransient, false},
		{"BOOT_FAIL", "None", slurm.Fail, builder.ErrTransient, false},
		{"PREEMPTED", "None", slurm.Fail, builder.ErrTransient, false},
		{"REVOKED", "None", slurm.Fail, builder.ErrTransient, false},
		{"CANCELLED", "None", slurm.Fail, builder.ErrFailed, false},
		{"DEADLINE", "None", slurm.Fail, builder.ErrFailed, false},
	} {
		act, err := slurm.Classify(slurm.JobInfo{ID: "1", State: c.state, Reason: c.reason})
		require.Equal(t, c.act, act, c.state)
		if c.class == nil {
			require.Nil(t, err, c.state)
			continue
		}
		require.Equal(t, c.class, builder.Class(err), c.state)
		require.Equal(t, c.timedOut, errors.Is(err, builder.ErrTimedOut), c.state)
	}
}

func FuzzParseScontrolJob(f *testing.F) {
	f.Add(scontrolFailed)
	f.Add("JobId=42 JobState=RUNNING Reason=None ExitCode=0:0 RunTime=1-02:03:04")
	f.Add("JobId=8 JobName=my job JobState=PENDING Comment==x")
	f.Add("slurm_load_jobs error: Invalid job id specified")
	f.Fuzz(func(t *testing.T, s string) {
		info, err := slurm.ParseScontrolJob(s)
		if err != nil {
			require.ErrorIs(t, err, slurm.ErrParse)
			return
		}
		checkInfo(t, info)
	})
}

func FuzzParseSqueue(f *testing.F) {
	f.Add("1|FAILED|NonZeroExitCode|0:00\n")
	f.Add("5|RUNNING|None|1-01:02:03")
	f.Fuzz(func(t *testing.T, s string) {
		info, err := slurm.ParseSqueue(s)
		if err != nil {
			require.ErrorIs(t, err, slurm.ErrParse)
			return
		}
		checkInfo(t, info)
	})
}

func FuzzParseSbatch(f *testing.F) {
	f.Add("123\n")
	f.Add("123;cluster")
	f.Add("sbatch: warning\n9")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := slurm.ParseSbatch(s)
		if err != nil {
			require.ErrorIs(t, err, slurm.ErrParse)
			return
		}
		require.NotEmpty(t, id)
		for _, r := range id {
			require.True(t, r >= '0' && r <= '9', "job ID %q", id)
		}
	})
}

func checkInfo(t *testing.T, info slurm.JobInfo) {
	require.NotEmpty(t, info.ID)
	require.NotEmpty(t, info.State)
	require.GreaterOrEqual(t, info.RunTime, time.Duration(0))
	require.True(t, info.ExitCode >= 0 && info.ExitCode <= 255 && info.Signal >= 0 && info.Signal <= 255)
	slurm.Classify(info) // never panics
}
