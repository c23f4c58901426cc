package main

// Exit statuses, the same in every command; exitStatusHelp describes them.
// They follow sysexits.h where it has a meaning that fits, so that cron
// wrappers and systemd units can tell "someone else is on it" from
// "broken", and a usage error from the 2 that many commands run by
// redlock run or elect exit with.
const (
	// exitOK: done. inspect: every verdict is known.
	exitOK = 0
	// exitFailure: an error that no other status names. release: nothing
	// was released. demo: two workers were inside one record at once.
	exitFailure = 1
	// exitUsage: a bad command, flag or argument; nothing was done.
	// EX_USAGE.
	exitUsage = 64
	// exitUnavailable: too few masters answered to decide. EX_UNAVAILABLE.
	exitUnavailable = 69
	// exitBusy: run: the lock was held elsewhere for all of --wait; the
	// command did not run. EX_TEMPFAIL: try again later.
	exitBusy = 75
	// exitLost: run, elect: the lock was lost while the command ran (a
	// renewal failed on quorum, or validity ran out first); the command
	// was stopped, or it had finished but may have overlapped with the
	// next holder.
	exitLost = 79
	// exitNotExecutable and exitNotFound: run, elect: the shell's statuses
	// for a command that could not be started.
	exitNotExecutable = 126
	exitNotFound      = 127
	// exitInterrupted: SIGINT or SIGTERM arrived before the work was done
	// (run, elect: before the command started). 128+SIGINT, as a shell
	// reports.
	exitInterrupted = 130
)

// exitStatusHelp is the table of exit statuses that redlock help and
// every command's -h print.
const exitStatusHelp = `Exit status, the same for every command:
    0  success; inspect: every verdict is known (held or not held)
    1  failure: an error not listed below; release: nothing was released;
       demo: two workers were inside one record at once
   64  usage error: a bad command, flag or argument; nothing was done
   69  fewer than a quorum of masters answered: run did not start the
       command; release: the lock may still be held; inspect: a verdict is
       unknown (the report is printed all the same)
   75  run: the lock was held elsewhere for all of --wait; the command did
       not run
   79  run, elect: the lock (the leadership) was lost while the command
       ran; the command was stopped
  126  run, elect: the command could not be executed
  127  run, elect: the command was not found
  130  interrupted (SIGINT or SIGTERM): run, elect before the command
       started; bench; inspect --watch before its first report (after it,
       the status of the last report)
  Otherwise run and elect exit with the command's own status (128+N when
  signal N ended it).
`
