//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// peeker checks an idle connection in one system call. Its raw connection and the function handed to it are made
// once per connection, so a check allocates nothing.
type peeker struct {
	raw  syscall.RawConn
	peek func(fd uintptr) bool
	open bool
}

func newPeeker(c net.Conn) *peeker {
	p := &peeker{}
	if sc, ok := c.(syscall.Conn); ok {
		p.raw, _ = sc.SyscallConn()
	}
	p.peek = func(fd uintptr) bool {
		var b [1]byte
		// Only "nothing to read yet" is open and quiet; a read of 0 bytes is the server's close, of more,
		// bytes it sent unasked, and any other error a broken connection.
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.open = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	}
	return p
}

// stillOpen tells whether an idle connection can carry a call: its server has not closed it and has sent
// nothing unasked. It peeks without waiting, in one system call; a connection it cannot peek at is taken as open.
func (p *peeker) stillOpen() bool {
	if p.raw == nil {
		return true
	}
	p.open = false
	err := p.raw.Read(p.peek)
	return err == nil && p.open
}
