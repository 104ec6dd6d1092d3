package cluster

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Sockets opened through Netns live in the namespace: a server listening on the client address inside it answers
// a client dialling from inside, and the same address does not exist in the machine's own namespace.
func TestNetnsDialAndListen(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the network namespace test needs root, which CI has")
		}
		t.Skip("needs root to create a network namespace")
	}
	n, err := CreateNetns("modelgate-netns-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Delete(); err != nil {
			t.Error(err)
		}
		if n.Exists() {
			t.Error("the namespace is still there")
		}
		releaseNetnsDir()
	})
	ln, err := n.Listen("tcp", net.JoinHostPort(ClientIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "inside") })}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	c := &http.Client{Transport: &http.Transport{DialContext: n.DialContext}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "inside" {
		t.Fatalf("answer %q", b)
	}
	// The machine's namespace has no such address: a listener there cannot bind it.
	if l, err := net.Listen("tcp", net.JoinHostPort(ClientIP, "0")); err == nil {
		l.Close()
		t.Fatalf("%s exists outside the namespace", ClientIP)
	} else if !strings.Contains(err.Error(), "assign requested address") {
		t.Fatalf("listen outside: %v", err)
	}
}
