package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procInfo is what Kill needs of one process from /proc/PID/stat.
type procInfo struct {
	state byte
	ppid  int
	pgrp  int
	// start is the process's start time in clock ticks after boot: with
	// the pid it names one process, even after the pid is reused.
	start uint64
}

// readProcStat parses a /proc stat file: "pid (comm) state ppid pgrp
// session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
// cstime priority nice threads itrealvalue starttime ...", where comm may
// contain anything.
func readProcStat(path string) (procInfo, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procInfo{}, false
	}
	return procInfo{state: f[0][0], ppid: ppid, pgrp: pgrp, start: start}, true
}

// procOf reads /proc/PID/stat.
func procOf(pid int) (procInfo, bool) {
	return readProcStat(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
}

// procTable reads the stat of every process on the machine.
func procTable() map[int]procInfo {
	table := make(map[int]procInfo)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return table
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, ok := procOf(pid); ok {
			table[pid] = info
		}
	}
	return table
}

// treeOf returns, with their start times, the processes of table that
// descend from leader (through ppid links, whatever their process group or
// session: a PostgreSQL backend calls setsid) or are in leader's process
// group, leader excluded, and those that write to log (fd 1 or 2 open on
// it, as every child of a server inherits), with their descendants: after
// the leader has exited its orphans are found that way. Only processes that
// started no earlier than since count: a pid of the tree that was reused
// names a newer process, and an older one is not ours. The leader's links
// count only if it is still the process that started at since.
func treeOf(table map[int]procInfo, leader int, since uint64, log os.FileInfo) map[int]uint64 {
	children := make(map[int][]int)
	tree := make(map[int]uint64)
	for pid, info := range table {
		children[info.ppid] = append(children[info.ppid], pid)
		if pid == leader || pid == os.Getpid() || info.start < since {
			continue
		}
		if info.pgrp == leader || writesTo(pid, log) {
			tree[pid] = info.start
		}
	}
	var queue []int
	if info, ok := table[leader]; ok && info.start == since {
		queue = append(queue, leader)
	}
	for pid := range tree {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if _, seen := tree[c]; seen || c == leader || table[c].start < since {
				continue
			}
			tree[c] = table[c].start
			queue = append(queue, c)
		}
	}
	return tree
}

// writesTo reports whether pid's standard output or error is the file log
// (nil: no file).
func writesTo(pid int, log os.FileInfo) bool {
	if log == nil {
		return false
	}
	for _, fd := range []string{"1", "2"} {
		st, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd))
		if err == nil && os.SameFile(st, log) {
			return true
		}
	}
	return false
}

// signalTree sends sig to every process of tree that is still the one
// that was collected (same start time).
func signalTree(tree map[int]uint64, sig syscall.Signal) {
	for pid, start := range tree {
		if info, ok := procOf(pid); ok && info.start == start {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// stopTree stops leader's process group with SIGSTOP, so nothing of it
// forks any more, and collects its tree (see treeOf; log is the path of
// the server's log), stopping each new process it finds, until a pass
// finds nothing new and everything found has stopped, or 3s pass: then it
// returns what it has. alive says that the leader has not been reaped, so
// its group may be signalled.
func stopTree(leader int, since uint64, alive bool, log string) map[int]uint64 {
	if alive {
		_ = syscall.Kill(-leader, syscall.SIGSTOP)
	}
	logInfo, _ := os.Stat(log)
	tree := make(map[int]uint64)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		grown := false
		for pid, start := range treeOf(procTable(), leader, since, logInfo) {
			if _, ok := tree[pid]; !ok {
				tree[pid], grown = start, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
		}
		if !grown && treeStopped(tree) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return tree
}

// treeStopped reports whether every thread of every process of tree has
// stopped (or exited).
func treeStopped(tree map[int]uint64) bool {
	for pid := range tree {
		if !stopped(pid) {
			return false
		}
	}
	return true
}

// stopped reports whether every thread of pid is stopped, a zombie, or
// gone.
func stopped(pid int) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true // it has exited
	}
	for _, task := range tasks {
		info, ok := readProcStat(filepath.Join(dir, task.Name(), "stat"))
		if ok && !strings.ContainsRune("TtZX", rune(info.state)) {
			return false
		}
	}
	return true
}

// treeGone waits until every process of tree has exited (gone from /proc,
// a zombie, or its pid reused by a newer process), or until deadline;
// then it returns an error naming one that has not.
func treeGone(tree map[int]uint64, deadline time.Time) error {
	for {
		alive := -1
		for pid, start := range tree {
			info, ok := procOf(pid)
			if ok && info.start == start && info.state != 'Z' && info.state != 'X' {
				alive = pid
				break
			}
			delete(tree, pid)
		}
		if alive < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its process %d has not exited", alive)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
