//go:build !unix

package redisserver

import (
	"errors"
	"os"
	"os/exec"
)

// setSysProcAttr does nothing where there are neither process groups nor
// PR_SET_PDEATHSIG.
func setSysProcAttr(*exec.Cmd, bool) {}

// pause and resume need SIGSTOP and SIGCONT.
func pause(*os.Process) error  { return errors.ErrUnsupported }
func resume(*os.Process) error { return errors.ErrUnsupported }
