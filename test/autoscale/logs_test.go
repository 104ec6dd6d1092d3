package autoscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/stack"
)

// TestLogsShowEveryReplica: behind two gatewayd replicas, the logs route of either shows the calls both made.
// The replica that answers the logs call finds the other through the EndpointSlices of gatewayd's metrics
// Service (written here as the EndpointSlice controller would, since envtest runs none) and reads its request
// log on its metrics listener.
func TestLogsShowEveryReplica(t *testing.T) {
	host := kubetest.EndpointAddress(t).String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := stack.StartTest(ctx, t, stack.Options{
		MetricsAddr: net.JoinHostPort(host, "0"),
		Gatewayd:    gatewayd.Options{PeersService: types.NamespacedName{Namespace: "default", Name: statsService}},
	})
	if s.Namespace != "default" {
		t.Fatalf("the stack seeded namespace %s; PeersService above assumes default", s.Namespace)
	}
	second := startGatewayd(ctx, t, s, host, clocktesting.NewFakeClock(time.Now()))
	publishReplicas(t, s.Client, s.Namespace, host, []string{s.MetricsURL, second.metrics})

	predict := func(base, requestID string) error {
		code, err := callModelTraced(base, s.APIKey, stack.ModelName, requestID)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("answered %d", code)
		}
		return err
	}
	logIDs := func(base string) ([]string, error) {
		body, _ := json.Marshal(map[string]any{"direction": "asc", "search_pattern": "^via-"})
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/models/"+stack.ModelName+"/deployments/"+stack.ModelDeploymentName+"/logs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out struct {
			Logs []struct {
				RequestID *string `json:"request_id"`
			} `json:"logs"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
			return nil, fmt.Errorf("logs answered %d", resp.StatusCode)
		}
		var ids []string
		for _, l := range out.Logs {
			if l.RequestID != nil {
				ids = append(ids, *l.RequestID)
			}
		}
		return ids, nil
	}

	// Each replica serves one call once it routes the seeded model.
	for base, id := range map[string]string{s.GatewayURL: "via-first", second.url: "via-second"} {
		eventually(t, "a call through "+base, func() error { return predict(base, id) })
	}
	eventually(t, "both calls in the first replica's logs", func() error {
		ids, err := logIDs(s.GatewayURL)
		if err != nil {
			return err
		}
		// A call retried above while the model was not yet routed may have a line of its own too.
		if !slices.Contains(ids, "via-first") || !slices.Contains(ids, "via-second") {
			return fmt.Errorf("request ids %q, want via-first and via-second", ids)
		}
		return nil
	})
}
