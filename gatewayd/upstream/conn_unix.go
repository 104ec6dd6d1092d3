//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// stillOpen tells whether an idle connection can carry a call: its server has not closed it and has sent
// nothing unasked. It peeks without waiting, in one system call.
func stillOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		// Only "nothing to read yet" is open and quiet; a read of 0 bytes is the server's close, of more,
		// bytes it sent unasked, and any other error a broken connection.
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && open
}
