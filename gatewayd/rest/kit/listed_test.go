package kit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/test/kubetest"
)

// TestAwaitListedShowsTheWrite writes through the API server and lists from an informer cache at once, as the
// list routes do after a write's answer: after AwaitListed the cache holds every write, in each of many rounds.
func TestAwaitListedShowsTheWrite(t *testing.T) {
	env := kubetest.StartTest(t, kubetest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lists, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = lists.Start(ctx) }()
	k := kit.New(kit.Options{Client: env.Client, Lister: lists, ReadYourWritesTimeout: 10 * time.Second})

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
		var list corev1.ConfigMapList
		if err := lists.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		for _, got := range list.Items {
			if got.Name == "listed" && got.Data["name"] != want {
				t.Fatalf("round %d: the list after the write shows %q, want %q", i, got.Data["name"], want)
			}
		}
	}
}
