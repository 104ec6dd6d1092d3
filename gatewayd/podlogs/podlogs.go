// Package podlogs reads what the pods of a model deployment print, through the API server's pods/log
// subresource, for the logs route of the management API. Only a container source has pods that modelgate owns:
// they are the pods of the Deployment the manager made for it (found by that Deployment's selector, once its
// controller reference says it is the deployment's own). A service or url source answers no pod lines.
package podlogs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Line is one line a pod printed.
type Line struct {
	Time    time.Time
	Pod     string
	Level   string
	Message string
}

// Query says which lines to return.
type Query struct {
	// Since and Until bound the lines' times, both included.
	Since, Until time.Time
	// Limit is how many lines to keep per pod: the first ones after Since, or with Newest the last ones before
	// Until.
	Limit  int
	Newest bool
	// Match, when set, keeps only the lines it accepts; Limit counts the lines it kept.
	Match func(Line) bool
}

// Reader reads the lines of a deployment's pods.
type Reader interface {
	Read(ctx context.Context, md *gatewayv1.ModelDeployment, q Query) ([]Line, error)
}

// Bounds of what Kube reads per call.
const (
	// MaxPods bounds the pods read.
	MaxPods = 20
	// MaxBytesPerPod bounds what an oldest-first read takes from one pod's log, from the window's start
	// (pods/log limitBytes).
	MaxBytesPerPod = 4 << 20
	// MaxTailLines bounds what a newest-first read takes from one pod's log: its last lines in the window
	// (pods/log tailLines), so the newest lines are never the ones cut.
	MaxTailLines = 5000
	// maxReadPerPod stops a read whatever the server sends.
	maxReadPerPod = 16 << 20
)

// Kube reads pod logs with client-go. It needs get on apps deployments, list on pods and get on pods/log.
type Kube struct{ cs kubernetes.Interface }

// New returns a Reader over cs.
func New(cs kubernetes.Interface) *Kube { return &Kube{cs: cs} }

// Read returns the matching lines of every pod of md's Deployment, at most q.Limit per pod: newest first, from
// the last MaxTailLines lines of each pod in the window; oldest first, from the first MaxBytesPerPod bytes. A pod
// whose log cannot be read (its container has not started) is left out and named in the error, with the others'
// lines.
func (k *Kube) Read(ctx context.Context, md *gatewayv1.ModelDeployment, q Query) ([]Line, error) {
	if md.Spec.Source.Container == nil {
		return nil, nil
	}
	dep, err := k.cs.AppsV1().Deployments(md.Namespace).Get(ctx, md.WorkloadName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to get Deployment %s: %w", md.WorkloadName(), err)
	}
	if !metav1.IsControlledBy(dep, md) || dep.Spec.Selector == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("failed to read the selector of Deployment %s: %w", dep.Name, err)
	}
	pods, err := k.cs.CoreV1().Pods(md.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), Limit: MaxPods})
	if err != nil {
		return nil, fmt.Errorf("failed to list the pods of Deployment %s: %w", dep.Name, err)
	}
	var out []Line
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if len(p.Spec.Containers) == 0 {
			continue
		}
		lines, err := k.readPod(ctx, p, q)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to read the log of pod %s: %w", p.Name, err))
			continue
		}
		out = append(out, lines...)
	}
	return out, errors.Join(errs...)
}

func (k *Kube) readPod(ctx context.Context, p *corev1.Pod, q Query) ([]Line, error) {
	since := metav1.NewTime(q.Since)
	// The model's container is the first: the manager makes one container per pod.
	opts := &corev1.PodLogOptions{Container: p.Spec.Containers[0].Name, Timestamps: true, SinceTime: &since}
	if q.Newest {
		opts.TailLines = ptr.To(int64(MaxTailLines))
	} else {
		opts.LimitBytes = ptr.To(int64(MaxBytesPerPod))
	}
	rc, err := k.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return Scan(io.LimitReader(rc, maxReadPerPod), p.Name, q)
}

// Scan reads a pods/log stream with timestamps (each line "<RFC 3339 time> <message>") and returns the lines of
// pod that q keeps. A line without a readable time is left out.
func Scan(r io.Reader, pod string, q Query) ([]Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out []Line
	next := 0 // with Newest, out is a ring of q.Limit lines and next its oldest
	for sc.Scan() {
		l, ok := ParseLine(sc.Text())
		if !ok {
			continue
		}
		if l.Time.Before(q.Since) {
			continue
		}
		if l.Time.After(q.Until) {
			break // the log is in time order
		}
		l.Pod = pod
		if q.Match != nil && !q.Match(l) {
			continue
		}
		switch {
		case len(out) < q.Limit:
			out = append(out, l)
		case q.Newest:
			out[next] = l
			next = (next + 1) % q.Limit
		default:
			return out, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return slices.Concat(out[next:], out[:next]), nil
}

// ParseLine splits a pods/log line with timestamps into its time and message, and reads the message's level.
func ParseLine(s string) (Line, bool) {
	ts, msg, ok := strings.Cut(s, " ")
	if !ok {
		ts, msg = s, ""
	}
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Line{}, false
	}
	return Line{Time: at, Message: msg, Level: LevelOf(msg)}, true
}

// LevelOf guesses the level of a line a model server printed from the first level word among its first 64
// bytes ("ERROR", "[warn]", "level=debug", {"level":"error"}, "CRITICAL", ...): DEBUG, INFO, WARNING or ERROR,
// and INFO when there is none.
func LevelOf(msg string) string {
	if len(msg) > 64 {
		msg = msg[:64]
	}
	for _, w := range strings.FieldsFunc(msg, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') }) {
		switch strings.ToUpper(w) {
		case "TRACE", "DEBUG":
			return "DEBUG"
		case "INFO", "NOTICE":
			return "INFO"
		case "WARN", "WARNING":
			return "WARNING"
		case "ERROR", "ERR", "FATAL", "CRITICAL", "PANIC":
			return "ERROR"
		}
	}
	return "INFO"
}
