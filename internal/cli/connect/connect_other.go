//go:build !unix

package connect

import "syscall"

func detachedProcess() *syscall.SysProcAttr { return nil }

func reapIfExited(int) (string, bool) { return "", false }
