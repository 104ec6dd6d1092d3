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
// manager's webhooks and controllers running: every child is either refused at admission or deleted with the
// parent, so none is left ParentNotFound, unserved and holding its external id.
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
	// Every parent goes, and no child is left.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var groups gatewayv1.GroupList
		if err := s.Client.List(ctx, &groups, client.InNamespace(ns.Name)); err != nil {
			t.Fatal(err)
		}
		if len(groups.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var left []string
			for _, g := range groups.Items {
				left = append(left, fmt.Sprintf("%s (parent %s, deleting %v)", g.Name, g.ParentID(), g.DeletionTimestamp != nil))
			}
			t.Fatalf("%d groups outlived their parent's deletion: %v", len(left), left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d of 400 children were admitted before their parent's deletion began; all were deleted with it", admitted)
	if err := s.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
		t.Fatal("namespace vanished")
	}
}
