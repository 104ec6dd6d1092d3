package kit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/test/kubetest"
)

// listedKit starts a real API server and an informer cache over it, as gatewayd's list routes read, and a Kit
// that writes through the API server and lists from that cache.
func listedKit(t *testing.T) (context.Context, *kubetest.Env, cache.Cache, *kit.Kit) {
	t.Helper()
	env := kubetest.StartTest(t, kubetest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	lists, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = lists.Start(ctx) }()
	return ctx, env, lists, kit.New(kit.Options{Client: env.Client, Lister: lists, ReadYourWritesTimeout: 10 * time.Second})
}

// listedNow lists the default namespace's ConfigMaps from the cache, as a list route does, and returns the one
// called name, nil when the list has none.
func listedNow(ctx context.Context, t *testing.T, lists cache.Cache, name string) *corev1.ConfigMap {
	t.Helper()
	var list corev1.ConfigMapList
	if err := lists.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	return nil
}

// TestAwaitListedShowsTheWrite writes through the API server and lists from an informer cache at once, as the
// list routes do after a write's answer: after AwaitListed the cache holds every write, in each of many rounds.
func TestAwaitListedShowsTheWrite(t *testing.T) {
	ctx, env, lists, k := listedKit(t)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "listed", Namespace: "default"}, Data: map[string]string{"name": "v0"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	k.AwaitListed(ctx, cm)
	for i := 1; i <= 50; i++ {
		want := fmt.Sprintf("v%d", i)
		cm.Data["name"] = want
		if err := env.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		k.AwaitListed(ctx, cm)
		if got := listedNow(ctx, t, lists, "listed"); got != nil && got.Data["name"] != want {
			t.Fatalf("round %d: the list after the write shows %q, want %q", i, got.Data["name"], want)
		}
	}
}

// TestAwaitUnlistedShowsTheDelete deletes through the API server and lists from an informer cache at once: after
// AwaitUnlisted the cache no longer holds the object, or holds it marked for deletion while a finalizer keeps it
// (the list routes leave those out), in each of many rounds.
func TestAwaitUnlistedShowsTheDelete(t *testing.T) {
	ctx, env, lists, k := listedKit(t)

	for i := range 30 {
		held := i%2 == 1 // every other object has a finalizer, so its delete only marks it
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gone-%d", i), Namespace: "default"}}
		if held {
			cm.Finalizers = []string{"example.com/hold"}
		}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		k.AwaitListed(ctx, cm)
		if err := env.Client.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
		k.AwaitUnlisted(ctx, cm)
		if got := listedNow(ctx, t, lists, cm.Name); got != nil && got.DeletionTimestamp == nil {
			t.Fatalf("round %d: the list after the delete still shows %s live (finalizer: %v)", i, cm.Name, held)
		}
		if held {
			release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
			if err := env.Client.Patch(ctx, cm, release); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}
