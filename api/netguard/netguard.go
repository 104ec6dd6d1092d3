// Package netguard keeps modelgate from being turned against its own network: a URL or registry host that a
// caller hands in (an async result webhook, a sandbox image reference) must not aim at loopback, private,
// link-local or other internal addresses, unless the operator allows them (a development stack); URLs must also
// be https. The static check refuses what it can see in the URL or host; the dialer guard checks every address a
// name resolves to at connection time, so DNS cannot smuggle an internal address past the first check. It lives
// in api/ because both planes use it: gatewayd (webhooks, image references) and the manager (imports, FROM).
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// MaxURLLength bounds a URL a caller hands in.
const MaxURLLength = 2048

// cgnat is the shared address space of RFC 6598, internal to carriers and often to clusters.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Internal reports whether ip is an address a caller may not make gatewayd reach: loopback, private (RFC 1918,
// RFC 4193), link-local (cloud metadata services live there), unspecified, multicast or shared (RFC 6598).
func Internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// CheckURL returns why raw may not be called, nil when it may. It must be an absolute https URL whose host is
// not an internal address; with allowInternal, internal addresses are allowed, and so is http to a loopback host
// or an internal address literal (a development stack's local receiver, or a receiver inside the cluster, which
// has no certificate a public CA signs). http to a public address or to a name is refused either way.
func CheckURL(raw string, allowInternal bool) error {
	if len(raw) > MaxURLLength {
		return fmt.Errorf("must be at most %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return errors.New("must be an absolute https URL")
	}
	host := u.Hostname()
	switch u.Scheme {
	case "https":
	case "http":
		if !allowInternal || !(isLoopbackHost(host) || isInternalLiteral(host)) {
			return errors.New("must use https")
		}
	default:
		return errors.New("must be an absolute https URL")
	}
	if allowInternal {
		return nil
	}
	if isLoopbackHost(host) {
		return errors.New("must not aim at a loopback address")
	}
	if isInternalLiteral(host) {
		return errors.New("must not aim at a private, link-local or otherwise internal address")
	}
	return nil
}

// isInternalLiteral reports whether host is an IP address literal that Internal covers.
func isInternalLiteral(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && Internal(ip)
}

// control refuses a connection to an internal address, after name resolution.
func control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %s: %w", address, err)
	}
	if Internal(ap.Addr()) {
		return fmt.Errorf("refusing to connect to the internal address %s", ap.Addr())
	}
	return nil
}

// Transport returns a transport for caller-supplied targets that may redirect (a registry sends blob reads to
// its storage): unless allowInternal, every connection, redirected ones included, is refused when it aims at an
// internal address after name resolution. It uses no proxy, so the guard sees the real destination.
func Transport(allowInternal bool) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowInternal {
		d.Control = control
	}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
}

// CheckHost returns why host (a registry host, with an optional port) may not be reached, nil when it may: the
// static half of the guard, for references that are not URLs.
func CheckHost(host string, allowInternal bool) error {
	if allowInternal {
		return nil
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if isLoopbackHost(host) {
		return errors.New("must not aim at a loopback address")
	}
	if isInternalLiteral(host) {
		return errors.New("must not aim at a private, link-local or otherwise internal address")
	}
	return nil
}

// Client returns an HTTP client for caller-supplied URLs: it does not follow redirects (a redirect could point
// anywhere) and, unless allowInternal, refuses connections to internal addresses. It uses no proxy, so the
// guard sees the real destination.
func Client(allowInternal bool) *http.Client {
	return &http.Client{Transport: Transport(allowInternal), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
