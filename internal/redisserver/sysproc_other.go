//go:build !linux

package redisserver

import "os/exec"

func setSysProcAttr(cmd *exec.Cmd) {}
