package requestlog

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// TestClusterReadsEveryReplica: a Cluster answers its own lines and those of every other replica it lists, read
// over HTTP on real sockets; its own listed address is not read twice (even under the same host name), and a
// replica that does not answer is an error, not a failure of the whole read.
func TestClusterReadsEveryReplica(t *testing.T) {
	at := time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)
	self, other := New("gatewayd-0", 0, 0), New("gatewayd-0", 0, 0) // one host name, two replicas
	third := New("gatewayd-2", 0, 0)
	self.Add("ws", "v1", Entry{Time: at, Level: LevelInfo, Message: "POST /production/predict 200 1ms", RequestID: "own"})
	other.Add("ws", "v1", Entry{Time: at.Add(time.Second), Level: LevelError, Message: "async attempt 1: 503 2ms", RequestID: "other"})
	other.Add("ws", "v2", Entry{Time: at, Level: LevelInfo, Message: "another deployment", RequestID: "v2"})
	serve := func(l *Log) string {
		mux := http.NewServeMux()
		mux.Handle("GET "+Path, l)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	_ = ln.Close()
	c := &Cluster{Local: self, Peers: func(context.Context) ([]string, error) {
		return []string{serve(self), serve(other), serve(third), down}, nil
	}}
	answers, errs := c.Read(context.Background(), "ws", "v1")
	if len(answers) != 3 || answers[0].Instance != self.instance || answers[1].Instance != other.instance || answers[2].Replica != "gatewayd-2" {
		t.Fatalf("answers %+v, want this replica's, then the other two once each", answers)
	}
	if got := answers[1].Entries; len(got) != 1 || got[0].RequestID != "other" || !got[0].Time.Equal(at.Add(time.Second)) || got[0].Level != LevelError {
		t.Errorf("the other replica's lines of v1: %+v", got)
	}
	if len(answers[2].Entries) != 0 {
		t.Errorf("a replica that never called v1 sent %+v", answers[2].Entries)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), down) {
		t.Errorf("errors %v, want one naming the replica that did not answer (%s)", errs, down)
	}

	// Listing the replicas fails: this replica's lines still answer.
	c.Peers = func(context.Context) ([]string, error) { return nil, errors.New("forbidden") }
	if answers, errs := c.Read(context.Background(), "ws", "v1"); len(answers) != 1 || len(answers[0].Entries) != 1 || len(errs) != 1 {
		t.Errorf("with no list of replicas: %+v, %v", answers, errs)
	}
}

// TestServeHTTPNeedsBothParameters: a peer's request without namespace or deployment is 400 invalid_request in
// the envelope of every answer, naming each missing parameter.
func TestServeHTTPNeedsBothParameters(t *testing.T) {
	for q, want := range map[string]string{"": "namespace,deployment", "?namespace=ws": "deployment", "?deployment=v1": "namespace"} {
		rec := httptest.NewRecorder()
		New("r", 0, 0).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+q, nil))
		var env struct {
			ErrorCode string               `json:"error_code"`
			Detail    []httperr.FieldError `json:"detail"`
		}
		err := json.Unmarshal(rec.Body.Bytes(), &env)
		var named []string
		for _, f := range env.Detail {
			named = append(named, f.Field)
		}
		if err != nil || rec.Code != http.StatusBadRequest || env.ErrorCode != httperr.CodeInvalidRequest || strings.Join(named, ",") != want {
			t.Errorf("GET %s%s: %d %s, want 400 invalid_request naming %s", Path, q, rec.Code, rec.Body, want)
		}
	}
}
