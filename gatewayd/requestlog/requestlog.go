// Package requestlog keeps, per model deployment, the last calls this gatewayd replica made to it (predict calls
// and async attempts): one line each, with its time, status, duration and request id, for the logs route of the
// management API. It is a bounded ring in memory: each replica knows only its own calls, a restart forgets them,
// and a deployment keeps its last PerDeployment lines (docs/decisions.md, "The request log of the logs route").
package requestlog

import (
	"sync"
	"time"

	"github.com/modelgate/modelgate/api/ids"
)

// Levels of a line, by the answer's status: the level names of the logs route.
const (
	LevelInfo    = "INFO"
	LevelWarning = "WARNING"
	LevelError   = "ERROR"
)

// LevelOf is the level of a call that answered status: ERROR for 5xx, WARNING for 4xx, INFO otherwise.
func LevelOf(status int) string {
	switch {
	case status >= 500:
		return LevelError
	case status >= 400:
		return LevelWarning
	}
	return LevelInfo
}

// Entry is one call. Its JSON form is the wire form of Path.
type Entry struct {
	Time      time.Time `json:"time"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	RequestID string    `json:"request_id"`
}

// Defaults of New.
const (
	DefaultPerDeployment  = 1000
	DefaultMaxDeployments = 256
)

// Log holds a ring of entries per (namespace, deployment). It is safe for concurrent use; a write takes the
// deployment's own lock, so calls to different deployments do not contend.
type Log struct {
	replica string
	// instance tells this Log from every other, so a replica that reads every replica's log over HTTP knows its
	// own answer even when two replicas share a host name.
	instance       string
	perDeployment  int
	maxDeployments int

	mu    sync.RWMutex
	rings map[key]*ring
}

type key struct{ namespace, deployment string }

type ring struct {
	mu      sync.Mutex
	entries []Entry
	next    int // where the next entry goes once entries is full
	last    time.Time
}

// New returns a Log that keeps perDeployment entries for each of at most maxDeployments deployments (the
// defaults when not positive); past that, the deployment written least recently is forgotten. replica names this
// gatewayd replica in the lines it answers.
func New(replica string, perDeployment, maxDeployments int) *Log {
	if perDeployment <= 0 {
		perDeployment = DefaultPerDeployment
	}
	if maxDeployments <= 0 {
		maxDeployments = DefaultMaxDeployments
	}
	return &Log{replica: replica, instance: ids.New(ids.RequestLog), perDeployment: perDeployment, maxDeployments: maxDeployments,
		rings: map[key]*ring{}}
}

// Replica names the gatewayd replica whose calls this Log holds.
func (l *Log) Replica() string { return l.replica }

// Add appends e to the ring of deployment in namespace, dropping its oldest entry when the ring is full.
func (l *Log) Add(namespace, deployment string, e Entry) {
	k := key{namespace, deployment}
	l.mu.RLock()
	r := l.rings[k]
	l.mu.RUnlock()
	if r == nil {
		r = l.ring(k)
	}
	r.mu.Lock()
	if len(r.entries) < l.perDeployment {
		r.entries = append(r.entries, e)
	} else {
		r.entries[r.next] = e
		r.next = (r.next + 1) % l.perDeployment
	}
	r.last = e.Time
	r.mu.Unlock()
}

// ring returns the ring of k, making it, and making room for it, when there is none.
func (l *Log) ring(k key) *ring {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.rings[k]; r != nil {
		return r
	}
	if len(l.rings) >= l.maxDeployments {
		var oldest key
		var at time.Time
		first := true
		for k, r := range l.rings {
			r.mu.Lock()
			last := r.last
			r.mu.Unlock()
			if first || last.Before(at) {
				oldest, at, first = k, last, false
			}
		}
		delete(l.rings, oldest)
	}
	r := &ring{}
	l.rings[k] = r
	return r
}

// Entries returns a copy of the entries of deployment in namespace, in the order they were added.
func (l *Log) Entries(namespace, deployment string) []Entry {
	l.mu.RLock()
	r := l.rings[key{namespace, deployment}]
	l.mu.RUnlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, len(r.entries))
	out = append(out, r.entries[r.next:]...)
	return append(out, r.entries[:r.next]...)
}

// Header carries a call's request id: on a predict call, the caller's when it brings a usable one (ID), else a
// new one, echoed in the answer; on every call gatewayd makes to a model server, sync or async, the id of the
// line the deployment's log records for it.
const Header = "X-Request-Id"

// maxIDLength bounds a request id a caller brings.
const maxIDLength = 128

// ID is the request id of a call: given (the caller's X-Request-Id) when it is 1 to 128 letters, digits or
// ".-_:", so that it is safe to echo and to log; otherwise a new id in the format of the OpenAI routes' ids.
func ID(given string) string {
	if len(given) == 0 || len(given) > maxIDLength {
		return ids.New(ids.Request)
	}
	for i := 0; i < len(given); i++ {
		c := given[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return ids.New(ids.Request)
		}
	}
	return given
}
