package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mpirunjob "github.com/weftml/weft/internal/mpirun"
	"github.com/weftml/weft/train"
)

// hostsScript makes and drives the simulated hosts (network namespaces).
var hostsScript, _ = filepath.Abs("../../bench/hosts.sh")

// upHosts makes n simulated hosts (bench/hosts.sh up n extra...) for the
// test, and removes them when it ends. The tests that use them run only
// with WEFT_HOSTS_TEST=1 (as root, with ip, unshare and Open MPI); then a
// fixture that cannot come up fails the test.
func upHosts(t *testing.T, n int, extra ...string) {
	t.Helper()
	if os.Getenv("WEFT_HOSTS_TEST") != "1" {
		t.Skip("simulated hosts: set WEFT_HOSTS_TEST=1 to run (root, ip, unshare, Open MPI)")
	}
	if out, err := exec.Command(hostsScript, append([]string{"up", strconv.Itoa(n)}, extra...)...).CombinedOutput(); err != nil {
		t.Fatalf("bench/hosts.sh up %d: %v\n%s", n, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(hostsScript, "down").CombinedOutput(); err != nil {
			t.Errorf("bench/hosts.sh down: %v\n%s", err, out)
		}
	})
}

// acrossHosts is mpirun on the simulated hosts, perHost ranks on each of
// them, running bin with args.
func acrossHosts(ranks, perHost int, bin string, args ...string) *exec.Cmd {
	job := []string{"mpirun", "-np", strconv.Itoa(ranks), "--map-by", "ppr:" + strconv.Itoa(perHost) + ":node", bin}
	return exec.Command(hostsScript, append(job, args...)...)
}

// TestHostsTrainMatchesOneHost trains a tiny gpt on 2 simulated hosts × 2
// ranks for every data-parallel strategy, and requires what 4 ranks on one
// host give (in-process ranks, which TestTrainUnderMpirun holds to
// one-host mpirun): the same metrics and final checkpoint, bit for bit.
// hsdp across hosts takes its shard size from them (a host's data-parallel
// ranks: 2, or 1 under --tp 2, whose rows are the hosts); on one host it is
// given.
func TestHostsTrainMatchesOneHost(t *testing.T) {
	upHosts(t, 2)
	bin := buildWeft(t)
	config := tinyConfig(t)
	for _, tc := range []struct {
		name  string
		args  []string
		local []string // what one host needs besides
	}{
		{"ddp", []string{"--strategy", "ddp"}, nil},
		{"zero1", []string{"--strategy", "zero1"}, nil},
		{"zero2", []string{"--strategy", "zero2"}, nil},
		{"fsdp", []string{"--strategy", "fsdp"}, nil},
		{"hsdp", []string{"--strategy", "hsdp", "--precision", "bf16-mixed"}, []string{"--shard-size", "2"}},
		{"hsdp/fp8", []string{"--strategy", "hsdp", "--precision", "bf16-mixed+fp8"}, []string{"--shard-size", "2"}},
		{"hsdp/tp2", []string{"--strategy", "hsdp", "--tp", "2"}, []string{"--shard-size", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"train", "--config", config, "--devices", "4"}, tc.args...)
			hosts := filepath.Join(t.TempDir(), "hosts")
			out, err := mpirunjob.Retry(func() ([]byte, error) {
				os.RemoveAll(hosts) // a retried job starts afresh
				return acrossHosts(4, 2, bin, append(args, "--comm", "mpi", "--out", hosts)...).CombinedOutput()
			})
			if err != nil {
				t.Fatalf("2 hosts × 2 ranks: %v\n%s", err, out)
			}
			one := filepath.Join(t.TempDir(), "one")
			if out, code := run(append(append(args, tc.local...), "--comm", "local", "--out", one)...); code != 0 {
				t.Fatalf("one host: exit %d\n%s", code, out)
			}
			hostsMetrics, hostsState := outcome(t, hosts, 3)
			oneMetrics, oneState := outcome(t, one, 3)
			if hostsMetrics != oneMetrics || hostsState != oneState {
				t.Fatalf("2 hosts:\n%sone host:\n%s(final checkpoints equal: %v)", hostsMetrics, oneMetrics, hostsState == oneState)
			}
		})
	}
}

// TestHostsLinkDown trains on 2 simulated hosts × 2 ranks, saving every 5
// steps, and takes host 2's link down after step 10: mpirun must exit
// non-zero within 30 s, the log name an unreachable rank (2 or 3, by its
// rank in the job, though hsdp loses it in a group of its own) and its
// host, no process be left on either host, and the last checkpoint resume,
// on one host, to the metrics and weights of an uninterrupted run; under
// fsdp and hsdp.
func TestHostsLinkDown(t *testing.T) {
	upHosts(t, 2)
	bin := buildWeft(t)
	config := tinyConfig(t)
	for _, tc := range []struct {
		strategy string
		local    []string // what one host needs besides
	}{{"fsdp", nil}, {"hsdp", []string{"--shard-size", "2"}}} {
		t.Run(tc.strategy, func(t *testing.T) {
			args := []string{"train", "--config", config, "--devices", "4", "--strategy", tc.strategy, "--steps", "300", "--save-every", "5"}
			out := t.TempDir()
			cmd := acrossHosts(4, 2, bin, append(args, "--comm", "mpi", "--comm-timeout", "5s", "--out", out)...)
			log, done := startLogged(t, cmd)
			waitForSteps(t, out, 10, done)
			if b, err := exec.Command(hostsScript, "link", "2", "down").CombinedOutput(); err != nil {
				t.Fatalf("link down: %v\n%s", err, b)
			}
			defer exec.Command(hostsScript, "link", "2", "up").Run()
			requireJobEnded(t, "the link went down", log, done)
			if !lostHost2.MatchString(log.String()) {
				t.Errorf("no line names an unreachable rank and host (%v):\n%s", lostHost2, log.String())
			}
			local := append(args, tc.local...)
			straight := t.TempDir()
			if res, code := run(append(local, "--comm", "local", "--out", straight)...); code != 0 {
				t.Fatalf("uninterrupted run: exit %d\n%s", code, res)
			}
			if res, code := run(append(local, "--comm", "local", "--out", out, "--resume")...); code != 0 {
				t.Fatalf("resume: exit %d\n%s", code, res)
			}
			gotMetrics, gotState := outcome(t, out, 300)
			wantMetrics, wantState := outcome(t, straight, 300)
			if gotMetrics != wantMetrics || gotState != wantState {
				t.Fatalf("the resumed run differs from the uninterrupted one (metrics equal %v, weights equal %v)", gotMetrics == wantMetrics, gotState == wantState)
			}
		})
	}
}

// TestHostsSignal sends SIGTERM to mpirun of an fsdp run on 2 simulated
// hosts × 2 ranks: every rank must stop at one step boundary, so that the
// job ends non-zero within 30 s with the stop's checkpoint, leaving no
// process on either host, and --resume on one host gives the metrics and
// weights of an uninterrupted run.
func TestHostsSignal(t *testing.T) {
	upHosts(t, 2)
	bin := buildWeft(t)
	const steps = 3000
	args := []string{"train", "--config", tinyConfig(t), "--devices", "4", "--strategy", "fsdp", "--steps", strconv.Itoa(steps), "--batch-size", "16", "--save-every", strconv.Itoa(10 * steps)}
	out := t.TempDir()
	cmd := acrossHosts(4, 2, bin, append(args, "--comm", "mpi", "--out", out)...)
	log, done := startLogged(t, cmd)
	waitForSteps(t, out, 20, done)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	requireJobEnded(t, "SIGTERM to mpirun", log, done)
	m, _, err := train.LatestCheckpoint(filepath.Join(out, "checkpoints"))
	if err != nil || m.Step < 20 || m.Step == steps {
		t.Fatalf("latest checkpoint %v (%v), want the stop's:\n%s", m, err, log.String())
	}
	t.Logf("signalled after step 20, stopped after step %d of %d", m.Step, steps)
	straight := t.TempDir()
	if res, code := run(append(args, "--comm", "local", "--out", straight)...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", code, res)
	}
	if res, code := run(append(args, "--comm", "local", "--out", out, "--resume")...); code != 0 {
		t.Fatalf("resume after step %d: exit %d\n%s", m.Step, code, res)
	}
	gotMetrics, gotState := outcome(t, out, steps)
	wantMetrics, wantState := outcome(t, straight, steps)
	if gotMetrics != wantMetrics || gotState != wantState {
		t.Fatalf("resumed after step %d, the run differs from the uninterrupted one (metrics equal %v, weights equal %v)", m.Step, gotMetrics == wantMetrics, gotState == wantState)
	}
}

// requireJobEnded requires the job to exit non-zero within 30 s of what
// happened, leaving no process on either host.
func requireJobEnded(t *testing.T, happened string, log *bytes.Buffer, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the job exited 0 after %s:\n%s", happened, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("mpirun still running 30 s after %s:\n%s", happened, log.String())
	}
	for _, host := range []string{"weft-h1", "weft-h2"} {
		if pids, _ := exec.Command("ip", "netns", "pids", host).Output(); len(bytes.TrimSpace(pids)) > 0 {
			t.Errorf("left running on %s: %s", host, pids)
		}
	}
}

// TestHostsKilled: a host whose weft processes are killed (kill -9, as the
// OOM killer does) ends the job as a dead link does, and the last
// checkpoint stays resumable.
func TestHostsKilled(t *testing.T) {
	upHosts(t, 2)
	bin := buildWeft(t)
	args := []string{"train", "--config", tinyConfig(t), "--devices", "4", "--strategy", "fsdp", "--steps", "300", "--save-every", "5"}
	out := t.TempDir()
	log, done := startLogged(t, acrossHosts(4, 2, bin, append(args, "--comm", "mpi", "--comm-timeout", "5s", "--out", out)...))
	waitForSteps(t, out, 10, done)
	pids, err := exec.Command("ip", "netns", "pids", "weft-h2").Output()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, pid := range strings.Fields(string(pids)) {
		if exe, _ := os.Readlink("/proc/" + pid + "/exe"); exe == bin {
			exec.Command("kill", "-9", pid).Run()
			killed++
		}
	}
	if killed != 2 {
		t.Fatalf("killed %d weft processes on host 2, want its 2 ranks", killed)
	}
	requireJobEnded(t, "host 2's ranks were killed", log, done)
	if killedRank := regexp.MustCompile(`rank [23] with PID \d+ on node \S+ exited on signal 9`); !killedRank.MatchString(log.String()) {
		t.Errorf("no line names a killed rank of host 2 and its node (%v):\n%s", killedRank, log.String())
	}
	if res, code := run(append(args, "--comm", "local", "--out", out, "--resume")...); code != 0 {
		t.Fatalf("resume after the kill: exit %d\n%s", code, res)
	}
}

// lostHost2 is a line naming host 2's ranks (2 and 3) as lost.
var lostHost2 = regexp.MustCompile(`ranks? (2|3|2, 3) did not join \w+ within 5s \(host weft-h2\)`)

// startLogged starts cmd with its output in log; done receives its end.
func startLogged(t *testing.T, cmd *exec.Cmd) (log *bytes.Buffer, done <-chan error) {
	t.Helper()
	log = new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	return log, ended
}

// TestHostsHSDPRefusals: hsdp without --shard-size takes a host's ranks
// as its shard group, and refuses, in one line, hosts that hold unequal
// numbers of ranks (3 ranks, 2 and 1) and ranks placed round-robin, whose
// hosts' ranks are not consecutive.
func TestHostsHSDPRefusals(t *testing.T) {
	upHosts(t, 2)
	bin := buildWeft(t)
	train := []string{bin, "train", "--config", tinyConfig(t), "--strategy", "hsdp", "--comm", "mpi", "--batch-size", "12"}
	for _, tc := range []struct {
		name string
		job  []string
		want string
	}{
		{"unequal", []string{"-np", "3", "--map-by", "ppr:2:node"}, "weft: strategy hsdp: the hosts hold unequal numbers of ranks (1 to 2), so no shard group is one host's; give --shard-size\n"},
		{"round-robin", []string{"-np", "4", "--map-by", "node"}, "weft: strategy hsdp: the ranks of a host are not consecutive (mpirun --map-by ppr:2:node places them so), so no shard group is one host's; give --shard-size\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devices := tc.job[1]
			args := append(append(append([]string{"mpirun"}, tc.job...), train...), "--devices", devices, "--out", t.TempDir())
			out, err := exec.Command(hostsScript, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("mpirun %s: %v, want the line %q in:\n%s", strings.Join(tc.job, " "), err, tc.want, out)
			}
		})
	}
}

// TestHostsOutNotShared: a run folder each host has a copy of its own
// (host 2's is a private tmpfs) is refused at start on every host, in one
// line, before a step.
func TestHostsOutNotShared(t *testing.T) {
	private := t.TempDir()
	upHosts(t, 2, "--private", private)
	bin := buildWeft(t)
	out := filepath.Join(private, "run")
	res, err := acrossHosts(2, 1, bin, "train", "--config", tinyConfig(t), "--strategy", "ddp", "--devices", "2", "--comm", "mpi", "--out", out).CombinedOutput()
	want := regexp.MustCompile(`weft: run folder \S+ is not shared: rank [01] does not see rank [01]'s files in it; --out must be on a filesystem every host sees\n`)
	if err == nil || !want.Match(res) || strings.Contains(string(res), "step 1") {
		t.Fatalf("a run folder private to each host: %v, want a refusal %q before any step in:\n%s", err, want, res)
	}
}

// TestJobDisagreement: the processes of one mpirun job (two programs, as
// two hosts with their own installs and data would be) refuse to train
// when they run different weft binaries or read different data.
func TestJobDisagreement(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := buildWeft(t)
	other := filepath.Join(t.TempDir(), "weft")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(b, 0), 0o755); err != nil { // the same program, other bytes
		t.Fatal(err)
	}
	train := []string{"train", "--config", tinyConfig(t), "--strategy", "ddp", "--devices", "2", "--comm", "mpi"}
	for _, tc := range []struct {
		name        string
		second      string
		secondExtra []string
		want        string
	}{
		{"binary", other, nil, "weft: rank 1 runs another weft binary than rank 0: every host must run the same build\n"},
		{"data", bin, []string{"--corpus-part", "net"}, "weft: rank 1 reads other data than rank 0 (its first batches differ): every host must hold the same --data, corpus and tokenizer\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			first := append(append(mpirunArgs(1), bin), append(train, "--out", out)...)
			second := append(append(mpirunArgs(1), tc.second), append(append(train, "--out", out), tc.secondExtra...)...)
			res, err := exec.Command(mpirun, append(append(first, ":"), second...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(res), tc.want) {
				t.Fatalf("mpirun: %v, want the line %q in:\n%s", err, tc.want, res)
			}
		})
	}
}
