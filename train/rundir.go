package train

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/weftml/weft/comm"
)

// A run folder (Config.Out) has one owner: the process that reports for
// its job (the only one with in-process ranks, rank 0 under mpirun) holds
// an advisory lock (flock) on lockFile inside it for the run's whole life,
// so a second weft train into the folder, or a second mpirun job, is
// refused at once; the kernel drops the lock however the process ends.
const lockFile = ".weft.lock"

// runFiles are what a run writes into its folder besides its checkpoints.
var runFiles = []string{"metrics.jsonl", "metrics.csv", "loss.png", "plan.json"}

// Notifier is an Observer that hears what a run read and did to its
// folder before its first step: the data, the checkpoint it resumed from,
// what Overwrite removed.
// An Observer without Note hears those lines through Warn.
type Notifier interface {
	Note(msg string)
}

// notify tells obs msg, through Note if it has one.
func notify(obs Observer, msg string) {
	if n, ok := obs.(Notifier); ok {
		n.Note(msg)
		return
	}
	obs.Warn(msg)
}

// claimRunDir makes c.Out this run's: the job's reporting process locks
// it and readies it for a fresh run (refusing one that holds a run,
// unless c.Overwrite) or for a resume, telling obs what it removed.
// release unlocks it.
func claimRunDir(c Config, resume bool, obs Observer) (release func(), err error) {
	if c.Overwrite && resume {
		return nil, fmt.Errorf("overwrite starts %s over and resume continues it: give one of --overwrite and --resume", c.Out)
	}
	if c.ResumeFrom != "" && !resume {
		return nil, fmt.Errorf("resume_from %s picks the checkpoint a resume loads: give --resume too", c.ResumeFrom)
	}
	if rank, launched := comm.LauncherRank(); launched && rank != 0 {
		return func() {}, nil // rank 0 holds the folder for the whole job
	}
	lock, err := lockRunDir(c.Out)
	if err != nil {
		return nil, err
	}
	if resume {
		err = removeStaleTemps(filepath.Join(c.Out, "checkpoints"), obs)
	} else {
		err = startOver(c, obs)
	}
	if err != nil {
		lock.Close()
		return nil, err
	}
	return func() { lock.Close() }, nil
}

// lockRunDir takes the lock on run folder out and records this process's
// id in it, for the message a second run gets.
func lockRunDir(out string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(out, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run folder: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(f)
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("run folder %s: lock: %w", out, err)
		}
		who := "another process"
		if pid := strings.TrimSpace(string(holder)); pid != "" {
			who = "pid " + pid
		}
		return nil, fmt.Errorf("%s is in use by %s (a weft train holds it): wait for that run to end, or train into another --out", out, who)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("run folder: %w", err)
	}
	return f, nil
}

// startOver readies out for a fresh run: a folder that holds a run is
// refused, unless c.Overwrite, which removes the run and says what it
// removed.
func startOver(c Config, obs Observer) error {
	held, err := heldRun(c.Out)
	if err != nil || len(held) == 0 {
		return err
	}
	what := strings.Join(held, ", ")
	if !c.Overwrite {
		return fmt.Errorf("%s holds a run (%s): pass --resume to continue it, --overwrite to start over, or another --out", c.Out, what)
	}
	for _, name := range append([]string{"checkpoints"}, runFiles...) {
		if err := os.RemoveAll(filepath.Join(c.Out, name)); err != nil {
			return fmt.Errorf("overwrite: %w", err)
		}
	}
	notify(obs, fmt.Sprintf("overwrite: removed the run in %s (%s)", c.Out, what))
	return nil
}

// heldRun lists what of a run folder out holds: its checkpoints (by step)
// and the files of runFiles; nil for a folder no run has written to.
func heldRun(out string) ([]string, error) {
	var held []string
	ckpts := filepath.Join(out, "checkpoints")
	if steps := checkpointSteps(ckpts); len(steps) > 0 {
		held = append(held, fmt.Sprintf("%s of %s %s", plural(len(steps), "checkpoint"), plural(len(steps), "step"), joinInts(steps)))
	} else if _, err := os.Stat(ckpts); err == nil {
		held = append(held, "checkpoints")
	}
	for _, name := range runFiles {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			held = append(held, name)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("run folder: %w", err)
		}
	}
	return held, nil
}

// checkpointSteps lists the steps of the checkpoint folders (step-NNNNNN)
// under dir, oldest first.
func checkpointSteps(dir string) []int {
	names, _ := filepath.Glob(filepath.Join(dir, "step-*"))
	var steps []int
	for _, name := range names {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(name), "step-")); err == nil {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps
}

// plural is what, with an s unless n is 1.
func plural(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// removeStaleTemps removes the unfinished checkpoints (.tmp-step-N) and
// files a run stopped mid-save left under dir, its checkpoints folder.
func removeStaleTemps(dir string, obs Observer) error {
	var stale []string
	for _, pattern := range []string{".tmp-*", ".*.tmp*"} {
		found, _ := filepath.Glob(filepath.Join(dir, pattern))
		stale = append(stale, found...)
	}
	for _, path := range stale {
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		notify(obs, fmt.Sprintf("resume: removed %s, left by a run stopped while saving", path))
	}
	return nil
}
