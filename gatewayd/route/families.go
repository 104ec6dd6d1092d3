// Package route is the route step of gatewayd: which upstream serves a call. It holds the routes that name a
// deployment (one table of families: a verb under each of the four ways of naming a deployment) and the one
// reading of which way a route took (Of); the resolution of a model or chain and its environment or deployment id
// to a deployment, with authz.Decide's answer on invoking it (AuthorizeInvoke, AuthorizeChainInvoke); and the
// address of a call (Slug for an OpenAI slug's Endpoint, Deployment for a model deployment's URL or a ready
// address of its Service, WakeTarget for the wake of one). The sync routes (gatewayd/inference) and the async
// ones (gatewayd/async) ask here and nowhere else, so a new kind of target changes this package, not the
// handlers. It writes no answer: every refusal is an *httperr.Error for the handler to write.
package route

import (
	"net/http"
	"strings"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"

	"github.com/modelgate/modelgate/gatewayd/ingress"
)

// A Family is one verb of the routes that name a deployment of a model or a chain: a route under each of the four
// selectors (production, development, environments/{env_name}, deployment/{deployment_id}).
type Family struct {
	method, object, verb string
}

// The objects a family's routes name, by their id.
const (
	models = "/models/{model_id}/"
	chains = "/chains/{chain_id}/"
)

// The families (docs/rest-api.md): with the selectors below, the table of every route that names a deployment.
var (
	// Predict forwards a call to the deployment (gatewayd/inference).
	Predict = Family{http.MethodPost, models, "predict"}
	// Wake asks for the deployment to be started, with no call to hold (gatewayd/inference).
	Wake = Family{http.MethodPost, models, "wake"}
	// AsyncPredict queues a call for the deployment (gatewayd/async).
	AsyncPredict = Family{http.MethodPost, models, "async_predict"}
	// AsyncQueueStatus counts the deployment's queued and running requests (gatewayd/async).
	AsyncQueueStatus = Family{http.MethodGet, models, "async_queue_status"}
	// RunRemote forwards a call to the entrypoint of the chain deployment (gatewayd/inference).
	RunRemote = Family{http.MethodPost, chains, "run_remote"}
	// AsyncRunRemote queues a call for the entrypoint of the chain deployment (gatewayd/async).
	AsyncRunRemote = Family{http.MethodPost, chains, "async_run_remote"}
)

// Families lists every family, for the routes' tests.
var Families = []Family{Predict, Wake, AsyncPredict, AsyncQueueStatus, RunRemote, AsyncRunRemote}

// The wildcards of the selectors that take a value.
const (
	envName      = "env_name"
	deploymentID = "deployment_id"
)

// selectors are the path segments between a family's object and its verb: the four ways a route names a
// deployment. Of reads them back.
var selectors = [...]string{
	gatewayv1.EnvironmentProduction,
	gatewayv1.EnvironmentDevelopment,
	"environments/{" + envName + "}",
	"deployment/{" + deploymentID + "}",
}

// Patterns are the ServeMux patterns of f's routes, one per selector.
func (f Family) Patterns() []string {
	out := make([]string, 0, len(selectors))
	for _, s := range selectors {
		out = append(out, f.method+" "+f.object+s+"/"+f.verb)
	}
	return out
}

// Register adds f's routes to mux, all served by handler.
func (f Family) Register(mux ingress.Mux, handler func(http.ResponseWriter, *http.Request)) {
	for _, p := range f.Patterns() {
		mux.HandleFunc(p, handler)
	}
}

// Selector is which deployment a route names: an environment ("production", "development" or a named one) or a
// deployment id. Exactly one field is set.
type Selector struct {
	Environment string
	Deployment  string
}

// what names the selector in an error's detail.
func (s Selector) what() string {
	if s.Deployment != "" {
		return "deployment_id: " + s.Deployment
	}
	return "environment: " + s.Environment
}

// Of reads which deployment the route that r matched names; r's pattern is one of a Family's. It allocates
// nothing.
func Of(r *http.Request) Selector {
	p := r.Pattern
	if i := strings.Index(p, "}/"); i >= 0 {
		p = p[i+2:] // past the object's id
	}
	seg, _, _ := strings.Cut(p, "/")
	switch seg {
	case gatewayv1.EnvironmentProduction, gatewayv1.EnvironmentDevelopment:
		return Selector{Environment: seg}
	case "environments":
		return Selector{Environment: r.PathValue(envName)}
	}
	return Selector{Deployment: r.PathValue(deploymentID)}
}
