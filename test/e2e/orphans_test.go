package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestNoChildOutlivesItsParent deletes a parent while children are being created under it, 20 times, with the
// manager's webhooks and controllers running. Every child whose admission found its parent is bound to it and is
// refused, or deleted with it, however late it reaches etcd; none is left ParentNotFound, unserved and holding
// its external id. A create that reaches admission after the parent is gone finds no parent and is admitted
// unbound, like any child applied before its parent (GitOps applies in any order); those are the only groups
// allowed to remain.
func TestNoChildOutlivesItsParent(t *testing.T) {
	s := theStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "orphans-"}}
	if err := s.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	group := func(name, parent string) *gatewayv1.Group {
		g := &gatewayv1.Group{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name}}
		g.Spec.ExternalEntityID = "ext-" + name
		g.Spec.Models = []gatewayv1.ModelConfig{{Slug: "demo/echo"}}
		if parent != "" {
			g.Spec.Hierarchy.ParentGroupID = &parent
		}
		return g
	}
	admitted := 0
	for trial := range 20 {
		parent := fmt.Sprintf("parent-%d", trial)
		if err := s.Client.Create(ctx, group(parent, "")); err != nil {
			t.Fatal(err)
		}
		// An established parent: the manager has taken it in (its cascade finalizer is on).
		for p := (&gatewayv1.Group{}); ; time.Sleep(20 * time.Millisecond) {
			if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: parent}, p); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(p.Finalizers, gatewayv1.Finalizer) {
				break
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Spread the creates over the moment the deletion begins.
				time.Sleep(time.Duration(i) * time.Millisecond)
				if err := s.Client.Create(ctx, group(fmt.Sprintf("%s-child-%d", parent, i), parent)); err == nil {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}()
		}
		time.Sleep(10 * time.Millisecond)
		if err := s.Client.Delete(ctx, group(parent, "")); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	// Every parent goes, and no child bound to one is left.
	deadline := time.Now().Add(2 * time.Minute)
	var unbound []string
	for {
		var groups gatewayv1.GroupList
		if err := s.Client.List(ctx, &groups, client.InNamespace(ns.Name)); err != nil {
			t.Fatal(err)
		}
		var left []string
		unbound = unbound[:0]
		for _, g := range groups.Items {
			uid, bound := g.Annotations[gatewayv1.AnnotationParentUID]
			if !bound && g.ParentID() != "" {
				unbound = append(unbound, g.Name)
				continue
			}
			left = append(left, fmt.Sprintf("%s (parent %q, bound to %q, deleting %v)", g.Name, g.ParentID(), uid, g.DeletionTimestamp != nil))
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups outlived their parent's deletion: %v", len(left), left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d of 400 children were admitted; every one whose admission found its parent was deleted with it; "+
		"%d were admitted after their parent was gone, unbound, as a child applied before its parent is", admitted, len(unbound))
	if err := s.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		t.Fatal("namespace vanished")
	}
}
