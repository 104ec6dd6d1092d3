// Package celvalidation runs every CEL and OpenAPI schema rule of the gateway.modelgate.io CRDs against a real
// kube-apiserver (envtest, the generated CRDs, no webhooks), so that a rule that does not compile, exceeds the
// cost budget or says something other than its author meant fails here rather than in a cluster.
package celvalidation

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/modelgate/modelgate/test/kubetest"
)

const namespace = "default"

var k8s client.Client

func TestMain(m *testing.M) {
	env, err := kubetest.Start(kubetest.Options{CRDs: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "The CEL validation tests need a control plane: %v\n", err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "Failed to stop envtest: %v\n", err)
	}
	os.Exit(code)
}

// celCase creates an object and, when update is set, then applies update to it as a JSON merge patch (given in
// YAML). The last write must be refused at wantPath with a message containing wantMsg, or, when wantPath is
// empty, admitted. Every earlier write must be admitted.
type celCase struct {
	name     string
	object   string
	update   string
	wantPath string
	wantMsg  string
}

// Objects used as valid starting points. Each case's object is one of these with a change, or its own YAML.
const (
	validGroup = `
kind: Group
spec:
  externalEntityID: cust-1
  models:
  - slug: demo/echo
    rateLimits: [{type: REQUEST, unit: MINUTE, threshold: 600}, {type: TOKEN, unit: SECOND, threshold: 100}]
    usageLimits: [{type: TOKEN, unit: DAY, threshold: 1000000}, {type: REQUEST, unit: DAY, threshold: 5}]
`
	childGroup = `
kind: Group
spec:
  externalEntityID: cust-2
  hierarchy: {limitEnforcement: CASCADING, parentGroupID: acme}
  models: [{slug: demo/echo}]
`
	hashedKey = `
kind: APIKey
spec:
  groupID: acme
  prefix: mgk_AAAAAAAAAAAA
  hash: "0000000000000000000000000000000000000000000000000000000000000001"
`
	endpoint = `
kind: Endpoint
spec:
  slug: demo/echo
  targets: [{provider: OPENAI, baseURL: "http://127.0.0.1:9999/v1", targetModel: echo}]
`
	hashedWorkspaceKey = `
kind: WorkspaceAPIKey
spec:
  type: WORKSPACE_INVOKE
  displayName: ci-bot
  models: [demo/echo]
  environments: [production]
  prefix: mgw_AAAAAAAAAAAA
  hash: "0000000000000000000000000000000000000000000000000000000000000001"
`
	validModel = `
kind: Model
spec:
  displayName: Sentiment
  environments: [{name: production, deployment: v2}, {name: staging, deployment: v3, autoscaling: {minReplica: 1, maxReplica: 4}}]
  development: v4
`
	urlDeployment = `
kind: ModelDeployment
spec:
  modelID: sentiment
  source: {url: "https://models.example.com/sentiment"}
`
	sandboxImage = `
kind: SandboxImage
spec: {teamID: red, name: "agents/python_3.12-slim"}
`
	uploadBuild = `
kind: SandboxImageBuild
spec: {imageRef: img-1, teamID: red, source: {upload: {}}}
`
	chainDeployment = `
kind: ChainDeployment
spec:
  chainID: pipe
  entrypoint: front
  chainlets:
  - {name: front, source: {container: {image: "registry.example.com/front:1", port: 9000}}}
  - {name: back, source: {url: "https://back.example.com"}}
`
	containerDeployment = `
kind: ModelDeployment
spec:
  modelID: sentiment
  source:
    container: {image: "registry.example.com/sentiment:1.2", port: 9000, env: [{name: MODEL, value: small}]}
  autoscaling: {minReplica: 0, maxReplica: 3, concurrencyTarget: 2}
`
)

func TestCRDValidation(t *testing.T) {
	tests := []celCase{
		// Group.
		{name: "group: valid object accepted", object: validGroup},
		{name: "group: valid cascading child accepted", object: childGroup},
		{name: "group: externalEntityID with NUL refused", object: `
kind: Group
spec: {externalEntityID: "cust\u0000x", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "group: externalEntityID with BEL refused", object: `
kind: Group
spec: {externalEntityID: "cust\u0007", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "group: externalEntityID with CR refused", object: `
kind: Group
spec: {externalEntityID: "cust\r", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "group: externalEntityID with leading space refused", object: `
kind: Group
spec: {externalEntityID: " cust", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "group: externalEntityID with trailing space refused", object: `
kind: Group
spec: {externalEntityID: "cust ", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "group: displayName with a newline refused", object: `
kind: Group
spec: {externalEntityID: ok, displayName: "Acme\nCorp", models: [{slug: m}]}`,
			wantPath: "spec.displayName", wantMsg: "must not contain control characters"},
		{name: "group: inner spaces and unicode accepted", object: `
kind: Group
spec: {externalEntityID: "cust 42 – Zürich", displayName: "Acme Corp", models: [{slug: m}]}`},
		{name: "group: parentGroupID change refused", object: childGroup,
			update:   `spec: {hierarchy: {limitEnforcement: CASCADING, parentGroupID: other}}`,
			wantPath: "spec.hierarchy", wantMsg: "hierarchy is immutable after creation"},
		{name: "group: limitEnforcement change refused", object: childGroup,
			update:   `spec: {hierarchy: {limitEnforcement: INDEPENDENT, parentGroupID: acme}}`,
			wantPath: "spec.hierarchy", wantMsg: "hierarchy is immutable after creation"},
		{name: "group: becoming a root refused", object: childGroup,
			update:   `spec: {hierarchy: {parentGroupID: null}}`,
			wantPath: "spec.hierarchy", wantMsg: "hierarchy is immutable after creation"},
		{name: "group: rate limit with unit DAY refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: REQUEST, unit: DAY, threshold: 5}]}]`,
			wantPath: "spec.models[0].rateLimits", wantMsg: "rate limits take unit SECOND or MINUTE"},
		{name: "group: usage limit with unit MINUTE refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, usageLimits: [{type: TOKEN, unit: MINUTE, threshold: 5}]}]`,
			wantPath: "spec.models[0].usageLimits", wantMsg: "usage limits take unit DAY"},
		{name: "group: COST as a rate limit refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: COST, unit: MINUTE, threshold: 5}]}]`,
			wantPath: "spec.models[0].rateLimits", wantMsg: "rate limits take type TOKEN or REQUEST: COST is a usage limit only (unit DAY or MONTH)"},
		{name: "group: COST and MONTH usage limits of every type admitted", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, usageLimits: [{type: COST, unit: MONTH, threshold: 5000000}, {type: COST, unit: DAY, threshold: 500000},
    {type: TOKEN, unit: MONTH, threshold: 5}, {type: TOKEN, unit: DAY, threshold: 5}, {type: REQUEST, unit: MONTH, threshold: 5},
    {type: REQUEST, unit: DAY, threshold: 5}]}]`},
		{name: "group: two COST MONTH usage limits on a slug refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, usageLimits: [{type: COST, unit: MONTH, threshold: 5}, {type: COST, unit: MONTH, threshold: 50}]}]`,
			wantPath: "spec.models[0].usageLimits", wantMsg: "at most one usage limit per type and unit"},
		{name: "group: two rate limits of one type on a slug refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: TOKEN, unit: SECOND, threshold: 5}, {type: TOKEN, unit: MINUTE, threshold: 50}]}]`,
			wantPath: "spec.models[0].rateLimits", wantMsg: "at most one rate limit per type"},
		{name: "group: two usage limits of one type on a slug refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, usageLimits: [{type: REQUEST, unit: DAY, threshold: 5}, {type: REQUEST, unit: DAY, threshold: 50}]}]`,
			wantPath: "spec.models[0].usageLimits", wantMsg: "at most one usage limit per type"},
		{name: "group: three rate limits refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: TOKEN, unit: SECOND, threshold: 5}, {type: REQUEST, unit: MINUTE, threshold: 50}, {type: REQUEST, unit: SECOND, threshold: 1}]}]`,
			wantPath: "spec.models[0].rateLimits", wantMsg: "must have at most 2 items"},
		{name: "group: threshold 0 refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: REQUEST, unit: MINUTE, threshold: 0}]}]`,
			wantPath: "spec.models[0].rateLimits[0].threshold", wantMsg: "should be greater than or equal to 1"},
		{name: "group: unknown limit type refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m, rateLimits: [{type: BYTES, unit: MINUTE, threshold: 1}]}]`,
			wantPath: "spec.models[0].rateLimits[0].type", wantMsg: "Unsupported value"},
		{name: "group: unknown enforcement refused", object: `
kind: Group
spec:
  externalEntityID: x
  hierarchy: {limitEnforcement: STRICT}
  models: [{slug: m}]`,
			wantPath: "spec.hierarchy.limitEnforcement", wantMsg: "Unsupported value"},
		{name: "group: models omitted on create refused", object: `
kind: Group
spec: {externalEntityID: x}`,
			wantPath: "spec.models", wantMsg: "models must be non-empty on create"},
		{name: "group: empty models on create refused", object: `
kind: Group
spec: {externalEntityID: x, models: []}`,
			wantPath: "spec.models", wantMsg: "models must be non-empty on create"},
		{name: "group: empty models on update accepted", object: validGroup, update: `spec: {models: []}`},
		{name: "group: duplicate slug refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: m}, {slug: m}]`,
			wantPath: "spec.models[1]", wantMsg: "Duplicate value"},
		{name: "group: bad slug refused", object: `
kind: Group
spec:
  externalEntityID: x
  models: [{slug: "/leading-slash"}]`,
			wantPath: "spec.models[0].slug", wantMsg: "should match"},
		{name: "group: empty externalEntityID refused", object: `
kind: Group
spec: {externalEntityID: "", models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "should be at least 1 chars long"},
		{name: "group: missing externalEntityID refused", object: `
kind: Group
spec: {models: [{slug: m}]}`,
			wantPath: "spec.externalEntityID", wantMsg: "Required value"},
		{name: "group: bad parentGroupID refused", object: `
kind: Group
spec:
  externalEntityID: x
  hierarchy: {parentGroupID: "Not_A_Name"}
  models: [{slug: m}]`,
			wantPath: "spec.hierarchy.parentGroupID", wantMsg: "should match"},

		// APIKey.
		{name: "apikey: minted key accepted", object: `
kind: APIKey
spec: {groupID: acme, displayName: prod}`},
		{name: "apikey: secretRef key accepted", object: `
kind: APIKey
spec: {groupID: acme, secretRef: {name: acme-key}}`},
		{name: "apikey: prefix and hash accepted", object: hashedKey},
		{name: "apikey: displayName change accepted", object: hashedKey, update: `spec: {displayName: renamed}`},
		{name: "apikey: hash without prefix refused", object: `
kind: APIKey
spec: {groupID: acme, hash: "0000000000000000000000000000000000000000000000000000000000000001"}`,
			wantPath: "spec", wantMsg: "prefix is required when hash is set"},
		{name: "apikey: prefix without hash refused", object: `
kind: APIKey
spec: {groupID: acme, prefix: mgk_AAAAAAAAAAAA}`,
			wantPath: "spec", wantMsg: "prefix may only be set together with hash"},
		{name: "apikey: hash and secretRef refused", object: `
kind: APIKey
spec:
  groupID: acme
  prefix: mgk_AAAAAAAAAAAA
  hash: "0000000000000000000000000000000000000000000000000000000000000001"
  secretRef: {name: acme-key}`,
			wantPath: "spec", wantMsg: "hash and secretRef are mutually exclusive"},
		{name: "apikey: hash change refused", object: hashedKey,
			update:   `spec: {hash: "0000000000000000000000000000000000000000000000000000000000000002"}`,
			wantPath: "spec", wantMsg: "prefix and hash are immutable"},
		{name: "apikey: prefix change refused", object: hashedKey,
			update:   `spec: {prefix: mgk_BBBBBBBBBBBB}`,
			wantPath: "spec", wantMsg: "prefix and hash are immutable"},
		{name: "apikey: adding a hash to a minted key refused", object: `
kind: APIKey
spec: {groupID: acme}`,
			update:   `spec: {prefix: mgk_BBBBBBBBBBBB, hash: "0000000000000000000000000000000000000000000000000000000000000002"}`,
			wantPath: "spec", wantMsg: "prefix and hash are immutable"},
		{name: "apikey: groupID change refused", object: hashedKey,
			update:   `spec: {groupID: other}`,
			wantPath: "spec", wantMsg: "groupID is immutable"},
		{name: "apikey: short prefix refused", object: `
kind: APIKey
spec: {groupID: acme, prefix: mgk_short, hash: "0000000000000000000000000000000000000000000000000000000000000001"}`,
			wantPath: "spec.prefix", wantMsg: "should be at least 16 chars long"},
		{name: "apikey: uppercase hash refused", object: `
kind: APIKey
spec: {groupID: acme, prefix: mgk_AAAAAAAAAAAA, hash: "000000000000000000000000000000000000000000000000000000000000000A"}`,
			wantPath: "spec.hash", wantMsg: "should match"},

		// Endpoint.
		{name: "endpoint: valid object accepted", object: endpoint},
		{name: "endpoint: https baseURL accepted", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "https://api.example.com/v1"}], timeout: 30s}`},
		{name: "endpoint: ftp baseURL refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "ftp://example.com/v1"}]}`,
			wantPath: "spec.targets[0].baseURL", wantMsg: "baseURL must be an absolute http or https URL"},
		{name: "endpoint: relative baseURL refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "example.com/v1"}]}`,
			wantPath: "spec.targets[0].baseURL", wantMsg: "baseURL must be an absolute http or https URL"},
		{name: "endpoint: credentials in baseURL refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "https://user:pass@api.example.com/v1"}]}`,
			wantPath: "spec.targets[0].baseURL", wantMsg: "baseURL must not carry credentials"},
		{name: "endpoint: an @ in the path is no credential", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "https://api.example.com/v1/@team"}]}`},
		{name: "endpoint: no targets refused", object: `
kind: Endpoint
spec: {slug: m, targets: []}`,
			wantPath: "spec.targets", wantMsg: "should have at least 1 items"},
		{name: "endpoint: two weighted targets with retry and cooldown accepted", object: `
kind: Endpoint
spec:
  slug: m
  targets:
  - {name: vllm-a, provider: OPENAI, baseURL: "http://a/v1", weight: 3, pricing: {inputPerMillionTokens: "0.60", outputPerMillionTokens: "0.8"}}
  - {provider: OPENAI, baseURL: "http://b/v1", priority: 9, weight: 1000}
  retry: {attempts: 5, onStatus: [400, 429, 599]}
  cooldown: {failures: 100, duration: 1h}`},
		{name: "endpoint: cooldown of 1s and 1 failure accepted", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], retry: {attempts: 0}, cooldown: {failures: 1, duration: 1s}}`},
		{name: "endpoint: 17 targets refused", object: seventeenTargets(),
			wantPath: "spec.targets", wantMsg: "must have at most 16 items"},
		{name: "endpoint: a repeated target name refused", object: `
kind: Endpoint
spec:
  slug: m
  targets: [{name: a, provider: OPENAI, baseURL: "http://a/v1"}, {name: a, provider: OPENAI, baseURL: "http://b/v1"}]`,
			wantPath: "spec.targets", wantMsg: "target names must be unique"},
		{name: "endpoint: a name equal to another target's default name refused", object: `
kind: Endpoint
spec:
  slug: m
  targets: [{name: target-1, provider: OPENAI, baseURL: "http://a/v1"}, {provider: OPENAI, baseURL: "http://b/v1"}]`,
			wantPath: "spec.targets", wantMsg: "may not equal the default name target-<index>"},
		{name: "endpoint: a target named by its own default name accepted", object: `
kind: Endpoint
spec:
  slug: m
  targets: [{name: target-0, provider: OPENAI, baseURL: "http://a/v1"}, {provider: OPENAI, baseURL: "http://b/v1"}]`},
		{name: "endpoint: an upper-case target name refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{name: VLLM, provider: OPENAI, baseURL: "http://a/v1"}]}`,
			wantPath: "spec.targets[0].name", wantMsg: "should match"},
		{name: "endpoint: a 64-character target name refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{name: "` + strings.Repeat("a", 64) + `", provider: OPENAI, baseURL: "http://a/v1"}]}`,
			wantPath: "spec.targets[0].name", wantMsg: "may not be more than 63 bytes"},
		{name: "endpoint: weight 0 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", weight: 0}]}`,
			wantPath: "spec.targets[0].weight", wantMsg: "should be greater than or equal to 1"},
		{name: "endpoint: weight 1001 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", weight: 1001}]}`,
			wantPath: "spec.targets[0].weight", wantMsg: "should be less than or equal to 1000"},
		{name: "endpoint: priority 10 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", priority: 10}]}`,
			wantPath: "spec.targets[0].priority", wantMsg: "should be less than or equal to 9"},
		{name: "endpoint: priority -1 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", priority: -1}]}`,
			wantPath: "spec.targets[0].priority", wantMsg: "should be greater than or equal to 0"},
		{name: "endpoint: a price with seven places refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", pricing: {inputPerMillionTokens: "0.0000001"}}]}`,
			wantPath: "spec.targets[0].pricing.inputPerMillionTokens", wantMsg: "should match"},
		{name: "endpoint: a negative price refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", pricing: {outputPerMillionTokens: "-1"}}]}`,
			wantPath: "spec.targets[0].pricing.outputPerMillionTokens", wantMsg: "should match"},
		{name: "endpoint: apiVersion on an OPENAI target refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", apiVersion: "2024-10-21"}]}`,
			wantPath: "spec.targets[0]", wantMsg: "apiVersion is taken only by an AZURE_OPENAI target"},
		{name: "endpoint: region on an OPENAI target refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1", region: us-east-1}]}`,
			wantPath: "spec.targets[0]", wantMsg: "region is taken only by a BEDROCK target"},
		{name: "endpoint: a BEDROCK target without region refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: BEDROCK, baseURL: "https://bedrock-runtime.us-east-1.amazonaws.com", targetModel: "anthropic.claude-3-haiku-20240307-v1:0"}]}`,
			wantPath: "spec.targets[0]", wantMsg: "region is required on a BEDROCK target"},
		{name: "endpoint: BEDROCK with region and GEMINI targets accepted", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: BEDROCK, baseURL: "https://bedrock-runtime.us-east-1.amazonaws.com", region: us-east-1}, {provider: GEMINI, baseURL: "https://generativelanguage.googleapis.com/v1beta", targetModel: gemini-2.0-flash}]}`},
		{name: "endpoint: 6 retry attempts refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], retry: {attempts: 6}}`,
			wantPath: "spec.retry.attempts", wantMsg: "should be less than or equal to 5"},
		{name: "endpoint: a retry status of 399 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], retry: {onStatus: [429, 399]}}`,
			wantPath: "spec.retry.onStatus[1]", wantMsg: "should be greater than or equal to 400"},
		{name: "endpoint: a retry status of 600 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], retry: {onStatus: [600]}}`,
			wantPath: "spec.retry.onStatus[0]", wantMsg: "should be less than or equal to 599"},
		{name: "endpoint: cooldown failures 0 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], cooldown: {failures: 0}}`,
			wantPath: "spec.cooldown.failures", wantMsg: "should be greater than or equal to 1"},
		{name: "endpoint: cooldown failures 101 refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], cooldown: {failures: 101}}`,
			wantPath: "spec.cooldown.failures", wantMsg: "should be less than or equal to 100"},
		{name: "endpoint: a cooldown of 999ms refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], cooldown: {duration: 999ms}}`,
			wantPath: "spec.cooldown.duration", wantMsg: "duration must be from 1s to 1h"},
		{name: "endpoint: a cooldown of 61m refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: OPENAI, baseURL: "http://a/v1"}], cooldown: {duration: 61m}}`,
			wantPath: "spec.cooldown.duration", wantMsg: "duration must be from 1s to 1h"},
		{name: "endpoint: unknown provider refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: COHERE, baseURL: "http://a/v1"}]}`,
			wantPath: "spec.targets[0].provider", wantMsg: "Unsupported value"},
		{name: "endpoint: an AZURE_OPENAI target without apiVersion refused", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: AZURE_OPENAI, baseURL: "https://a.openai.azure.com"}]}`,
			wantPath: "spec.targets[0]", wantMsg: "apiVersion is required on an AZURE_OPENAI target"},
		{name: "endpoint: AZURE_OPENAI and ANTHROPIC targets accepted", object: `
kind: Endpoint
spec: {slug: m, targets: [{provider: AZURE_OPENAI, baseURL: "https://a.openai.azure.com", apiVersion: "2024-10-21"}, {provider: ANTHROPIC, baseURL: "https://api.anthropic.com/v1"}]}`},
		{name: "endpoint: slug change refused", object: endpoint,
			update:   `spec: {slug: demo/other}`,
			wantPath: "spec.slug", wantMsg: "slug is immutable"},
		{name: "endpoint: target change accepted", object: endpoint,
			update: `spec: {targets: [{provider: OPENAI, baseURL: "https://new.example.com/v1"}]}`},

		// Workspace.
		{name: "workspace: valid object accepted", object: `
kind: Workspace
spec:
  keyRegistration: {publicKey: "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="}
  billingWebhook: {url: "https://billing.example.com/hook", secretRef: {name: billing, key: secret}}
  modelAPITier: {requestsPerMinute: 60, tokensPerMinute: 60000}`},
		{name: "workspace: empty spec accepted", object: `
kind: Workspace
spec: {}`},
		{name: "workspace: bad publicKey refused", object: `
kind: Workspace
spec: {keyRegistration: {publicKey: "not-a-key"}}`,
			wantPath: "spec.keyRegistration.publicKey", wantMsg: "should match"},
		{name: "workspace: billing url not http refused", object: `
kind: Workspace
spec: {billingWebhook: {url: "mailto:billing@example.com", secretRef: {name: billing}}}`,
			wantPath: "spec.billingWebhook.url", wantMsg: "url must be an absolute http or https URL"},
		{name: "workspace: tier of 0 refused", object: `
kind: Workspace
spec: {modelAPITier: {requestsPerMinute: 0}}`,
			wantPath: "spec.modelAPITier.requestsPerMinute", wantMsg: "should be greater than or equal to 1"},

		// WorkspaceAPIKey.
		{name: "workspace key: scoped invoke key accepted", object: hashedWorkspaceKey},
		{name: "workspace key: personal key with owner accepted", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL, displayName: dev-laptop, owner: {userID: u1, email: a@example.com, role: ADMIN}}`},
		{name: "workspace key: personal key without owner refused", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL}`,
			wantPath: "spec.owner", wantMsg: "owner is required for PERSONAL keys"},
		{name: "workspace key: models alone on a metrics key accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_EXPORT_METRICS, models: [demo]}`},
		{name: "workspace key: models alone on a manage-all key refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_MANAGE_ALL, models: [demo]}`,
			wantPath: "spec.models", wantMsg: "models alone scopes WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys only"},
		{name: "workspace key: models with environments on a manage-all key accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_MANAGE_ALL, models: [demo], environments: [staging]}`},
		{name: "workspace key: models on a personal key refused", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL, owner: {userID: u1}, models: [demo]}`,
			wantPath: "spec.models", wantMsg: "models alone scopes WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys only"},
		{name: "workspace key: environments on a metrics key refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_EXPORT_METRICS, environments: [production]}`,
			wantPath: "spec.environments", wantMsg: "environments scoping applies to WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only"},
		{name: "workspace key: an empty model id refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, models: [""]}`,
			wantPath: "spec.models[0]", wantMsg: "must be a model name or an Endpoint slug"},
		{name: "workspace key: a model id with a path refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, models: [demo, ../x]}`,
			wantPath: "spec.models[1]", wantMsg: "must be a model name or an Endpoint slug"},
		{name: "workspace key: a slug with a slash accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, models: [demo/echo, gpt-4o]}`},
		{name: "workspace key: an environment with a path refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, environments: [production, ../x]}`,
			wantPath: "spec.environments[1]", wantMsg: "must be an environment name (lowercase RFC 1123 label)"},
		{name: "workspace key: teamID on a personal key refused", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL, owner: {userID: u1}, teamID: ml}`,
			wantPath: "spec.teamID", wantMsg: "teamID may not be set on PERSONAL or WORKSPACE_MANAGE_API_KEYS keys"},
		{name: "workspace key: teamID on a key-management key refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_MANAGE_API_KEYS, teamID: ml}`,
			wantPath: "spec.teamID", wantMsg: "teamID may not be set on PERSONAL or WORKSPACE_MANAGE_API_KEYS keys"},
		{name: "workspace key: teamID on an invoke key accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, teamID: ml}`},
		{name: "workspace key: createdBy with both fields refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, createdBy: {userID: u1, apiKeyPrefix: mgw_abc}}`,
			wantPath: "spec.createdBy", wantMsg: "give exactly one of userID and apiKeyPrefix"},
		{name: "workspace key: createdBy set once on update accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE}`, update: `spec: {createdBy: {userID: u1}}`},
		{name: "workspace key: createdBy changed refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, createdBy: {userID: u1}}`, update: `spec: {createdBy: {userID: u2}}`,
			wantPath: "spec.createdBy", wantMsg: "createdBy is immutable once set"},
		{name: "team: member with an unknown role refused", object: `
kind: Team
spec: {displayName: ML, members: [{userID: u1, role: OWNER}]}`,
			wantPath: "spec.members[0].role", wantMsg: "Unsupported value"},
		{name: "team: duplicate member refused", object: `
kind: Team
spec: {displayName: ML, members: [{userID: u1, role: ADMIN}, {userID: u1, role: MEMBER}]}`,
			wantPath: "spec.members[1]", wantMsg: "Duplicate value"},
		{name: "team: valid team accepted", object: `
kind: Team
spec: {displayName: Machine Learning, default: true, members: [{userID: u1, role: ADMIN}, {userID: u2, role: MEMBER}]}`},
		{name: "team: empty displayName refused", object: `
kind: Team
spec: {displayName: ""}`,
			wantPath: "spec.displayName", wantMsg: "should be at least 1 chars long"},
		{name: "team: displayName with a trailing space refused", object: `
kind: Team
spec: {displayName: "ML "}`,
			wantPath: "spec.displayName", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "team: member without role refused", object: `
kind: Team
spec: {displayName: ML, members: [{userID: u1}]}`,
			wantPath: "spec.members[0].role", wantMsg: "Required value"},
		{name: "workspace: members with roles accepted", object: `
kind: Workspace
spec: {members: [{userID: u1, email: a@example.com, name: Alice, role: ADMIN}, {userID: u2, role: MEMBER}]}`},
		{name: "workspace: empty members accepted (membership adopted, nobody listed)", object: `
kind: Workspace
spec: {members: []}`},
		{name: "workspace: member with an unknown role refused", object: `
kind: Workspace
spec: {members: [{userID: u1, role: OWNER}]}`,
			wantPath: "spec.members[0].role", wantMsg: "Unsupported value"},
		{name: "workspace: member userID with a leading space refused", object: `
kind: Workspace
spec: {members: [{userID: " u1", role: MEMBER}]}`,
			wantPath: "spec.members[0].userID", wantMsg: "must not contain control characters, nor begin or end with a space"},
		{name: "workspace: modelAPILimits of 0 refused", object: `
kind: Workspace
spec: {modelAPILimits: {tokensPerMinute: 0}}`,
			wantPath: "spec.modelAPILimits.tokensPerMinute", wantMsg: "should be greater than or equal to 1"},
		{name: "workspace key: createdBy removed refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, createdBy: {apiKeyPrefix: mgw_AAAAAAAAAAAA}}`, update: `spec: {createdBy: null}`,
			wantPath: "spec.createdBy", wantMsg: "createdBy is immutable once set"},
		{name: "workspace key: createdBy with neither field refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, createdBy: {}}`,
			wantPath: "spec.createdBy", wantMsg: "give exactly one of userID and apiKeyPrefix"},
		{name: "workspace key: models within environments on an invoke key accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, teamID: ml, models: [demo], environments: [staging]}`},
		{name: "workspace key: environments on a key-management key refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_MANAGE_API_KEYS, environments: [staging]}`,
			wantPath: "spec.environments", wantMsg: "environments scoping applies to WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only"},
		{name: "workspace key: models on a key-management key refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_MANAGE_API_KEYS, models: [demo]}`,
			wantPath: "spec.models", wantMsg: "models alone scopes WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys only"},
		{name: "workspace key: teamID on a metrics key accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_EXPORT_METRICS, teamID: ml}`},
		{name: "workspace key: teamID longer than a DNS-1123 label refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, teamID: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}`,
			wantPath: "spec.teamID", wantMsg: "may not be more than 63 bytes"},
		{name: "workspace key: rename accepted", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, displayName: ci}`, update: `spec: {displayName: ci-2}`},
		{name: "workspace: duplicate member refused", object: `
kind: Workspace
spec: {members: [{userID: u1, role: ADMIN}, {userID: u1, role: MEMBER}]}`,
			wantPath: "spec.members[1]", wantMsg: "Duplicate value"},
		{name: "workspace key: environments on a personal key refused", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL, owner: {userID: u1}, environments: [production]}`,
			wantPath: "spec.environments", wantMsg: "environments scoping applies to WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only"},
		{name: "workspace key: uppercase displayName refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, displayName: CI_Bot}`,
			wantPath: "spec.displayName", wantMsg: "should match"},
		{name: "workspace key: unknown type refused", object: `
kind: WorkspaceAPIKey
spec: {type: ROOT}`,
			wantPath: "spec.type", wantMsg: "Unsupported value"},
		{name: "workspace key: unknown owner role refused", object: `
kind: WorkspaceAPIKey
spec: {type: PERSONAL, owner: {userID: u1, role: OWNER}}`,
			wantPath: "spec.owner.role", wantMsg: "Unsupported value"},
		{name: "workspace key: type change refused", object: hashedWorkspaceKey,
			update:   `spec: {type: WORKSPACE_MANAGE_ALL}`,
			wantPath: "spec", wantMsg: "type is immutable"},
		{name: "workspace key: hash without prefix refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, hash: "0000000000000000000000000000000000000000000000000000000000000001"}`,
			wantPath: "spec", wantMsg: "prefix is required when hash is set"},
		{name: "workspace key: prefix without hash refused", object: `
kind: WorkspaceAPIKey
spec: {type: WORKSPACE_INVOKE, prefix: mgw_AAAAAAAAAAAA}`,
			wantPath: "spec", wantMsg: "prefix may only be set together with hash"},
		{name: "workspace key: hash and secretRef refused", object: `
kind: WorkspaceAPIKey
spec:
  type: WORKSPACE_INVOKE
  prefix: mgw_AAAAAAAAAAAA
  hash: "0000000000000000000000000000000000000000000000000000000000000001"
  secretRef: {name: k}`,
			wantPath: "spec", wantMsg: "hash and secretRef are mutually exclusive"},
		{name: "workspace key: hash change refused", object: hashedWorkspaceKey,
			update:   `spec: {hash: "0000000000000000000000000000000000000000000000000000000000000002"}`,
			wantPath: "spec", wantMsg: "prefix and hash are immutable"},
		{name: "workspace key: scoping change accepted", object: hashedWorkspaceKey,
			update: `spec: {models: [demo/echo, demo/other]}`},

		// Model.
		{name: "model: valid object accepted", object: validModel},
		{name: "model: production alone, not yet promoted, accepted", object: `
kind: Model
spec: {environments: [{name: production}]}`},
		{name: "model: no production environment refused", object: `
kind: Model
spec: {environments: [{name: staging, deployment: v1}]}`,
			wantPath: "spec.environments", wantMsg: "a production environment is required"},
		{name: "model: no environments refused", object: `
kind: Model
spec: {environments: []}`,
			wantPath: "spec.environments", wantMsg: "should have at least 1 items"},
		{name: "model: removing production refused", object: validModel,
			update:   `spec: {environments: [{name: staging, deployment: v3}]}`,
			wantPath: "spec.environments", wantMsg: "a production environment is required"},
		{name: "model: development as an environment refused", object: `
kind: Model
spec: {environments: [{name: production}, {name: development, deployment: v1}]}`,
			wantPath: "spec.environments", wantMsg: "development is not an environment: set spec.development"},
		{name: "model: duplicate environment names refused", object: `
kind: Model
spec: {environments: [{name: production, deployment: v1}, {name: production, deployment: v2}]}`,
			wantPath: "spec.environments[1]", wantMsg: "Duplicate value"},
		{name: "model: uppercase environment name refused", object: `
kind: Model
spec: {environments: [{name: production}, {name: Staging}]}`,
			wantPath: "spec.environments[1].name", wantMsg: "should match"},
		{name: "model: promotion accepted", object: validModel,
			update: `spec: {environments: [{name: production, deployment: v3}, {name: staging, deployment: v3}]}`},
		{name: "model: environment autoscaling minReplica above maxReplica refused", object: `
kind: Model
spec: {environments: [{name: production, autoscaling: {minReplica: 3, maxReplica: 2}}]}`,
			wantPath: "spec.environments[0].autoscaling.minReplica", wantMsg: "minReplica must not exceed maxReplica"},

		// ModelDeployment.
		{name: "deployment: url source accepted", object: urlDeployment},
		{name: "deployment: container source accepted", object: containerDeployment},
		{name: "deployment: service source accepted", object: `
kind: ModelDeployment
spec:
  modelID: sentiment
  source: {service: {name: vllm, port: 8000, scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}}}`},
		{name: "deployment: no source refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {}}`,
			wantPath: "spec.source", wantMsg: "exactly one of container, service and url must be set"},
		{name: "deployment: two sources refused", object: `
kind: ModelDeployment
spec:
  modelID: sentiment
  source: {url: "https://models.example.com/x", service: {name: vllm, port: 8000}}`,
			wantPath: "spec.source", wantMsg: "exactly one of container, service and url must be set"},
		{name: "deployment: ftp url refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "ftp://models.example.com/x"}}`,
			wantPath: "spec.source.url", wantMsg: "url must be an absolute http or https URL"},
		{name: "deployment: relative url refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "models.example.com/x"}}`,
			wantPath: "spec.source.url", wantMsg: "url must be an absolute http or https URL"},
		{name: "deployment: credentials in url refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "https://user:pass@models.example.com/x"}}`,
			wantPath: "spec.source.url", wantMsg: "url must not carry credentials (user:password@)"},
		{name: "deployment: env secretKeyRef without key refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {container: {image: "x:1", env: [{name: TOKEN, secretKeyRef: {name: hf}}]}}}`,
			wantPath: "spec.source.container.env[0].secretKeyRef.key", wantMsg: "secretKeyRef.key is required"},
		{name: "deployment: env with value and secretKeyRef refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {container: {image: "x:1", env: [{name: TOKEN, value: v, secretKeyRef: {name: hf, key: t}}]}}}`,
			wantPath: "spec.source.container.env[0]", wantMsg: "give value or secretKeyRef, not both"},
		{name: "deployment: an @ in the url path is no credential", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "http://10.0.0.7:8080/models/@v2"}}`},
		{name: "deployment: modelID change refused", object: urlDeployment,
			update:   `spec: {modelID: other}`,
			wantPath: "spec.modelID", wantMsg: "modelID is immutable"},
		{name: "deployment: source change refused", object: urlDeployment,
			update:   `spec: {source: {url: "https://models.example.com/elsewhere"}}`,
			wantPath: "spec.source", wantMsg: "source is immutable"},
		{name: "deployment: container image change refused", object: containerDeployment,
			update:   `spec: {source: {container: {image: "registry.example.com/sentiment:1.3"}}}`,
			wantPath: "spec.source", wantMsg: "source is immutable"},
		{name: "deployment: startupTimeoutSeconds change refused", object: urlDeployment,
			update:   `spec: {startupTimeoutSeconds: 30}`,
			wantPath: "spec.startupTimeoutSeconds", wantMsg: "startupTimeoutSeconds is immutable"},
		{name: "deployment: predictPath change refused", object: urlDeployment,
			update:   `spec: {predictPath: /v2/predict}`,
			wantPath: "spec.predictPath", wantMsg: "predictPath is immutable"},
		{name: "deployment: readinessPath change refused", object: urlDeployment,
			update:   `spec: {readinessPath: /ready}`,
			wantPath: "spec.readinessPath", wantMsg: "readinessPath is immutable"},
		{name: "deployment: deactivation accepted", object: urlDeployment, update: `spec: {active: false}`},
		{name: "deployment: autoscaling change accepted", object: containerDeployment,
			update: `spec: {autoscaling: {minReplica: 1, maxReplica: 8, concurrencyTarget: 4, scaleDownDelaySeconds: 60}}`},
		{name: "deployment: retryNonce change accepted", object: urlDeployment, update: `spec: {retryNonce: 1}`},
		{name: "deployment: minReplica above maxReplica refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "https://models.example.com/x"}, autoscaling: {minReplica: 3, maxReplica: 2}}`,
			wantPath: "spec.autoscaling.minReplica", wantMsg: "minReplica must not exceed maxReplica"},
		{name: "deployment: minReplica above the default maxReplica of 1 refused", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "https://models.example.com/x"}, autoscaling: {minReplica: 2}}`,
			wantPath: "spec.autoscaling.minReplica", wantMsg: "minReplica must not exceed maxReplica"},
		{name: "deployment: raising minReplica above maxReplica refused", object: containerDeployment,
			update:   `spec: {autoscaling: {minReplica: 4}}`,
			wantPath: "spec.autoscaling.minReplica", wantMsg: "minReplica must not exceed maxReplica"},
		{name: "deployment: minReplica equal to maxReplica accepted", object: `
kind: ModelDeployment
spec: {modelID: sentiment, source: {url: "https://models.example.com/x"}, autoscaling: {minReplica: 2, maxReplica: 2}}`},

		// Workspace.spec.imageRegistry.
		{name: "workspace: image registry accepted", object: `
kind: Workspace
spec: {imageRegistry: {url: "registry.example.com/sandboxes", secretRef: {name: registry-creds}}}`},
		{name: "workspace: image registry without url refused", object: `
kind: Workspace
spec: {imageRegistry: {url: ""}}`, wantPath: "spec.imageRegistry.url", wantMsg: "at least 1 chars long"},

		// SandboxImage and SandboxImageBuild.
		{name: "sandbox image: valid object accepted", object: sandboxImage},
		{name: "sandbox image: name with uppercase refused", object: `
kind: SandboxImage
spec: {teamID: red, name: Agent}`, wantPath: "spec.name", wantMsg: "should match"},
		{name: "sandbox image: name with a leading separator refused", object: `
kind: SandboxImage
spec: {teamID: red, name: "-agent"}`, wantPath: "spec.name", wantMsg: "should match"},
		{name: "sandbox image: team change refused", object: sandboxImage, update: `spec: {teamID: blue}`,
			wantPath: "spec", wantMsg: "spec is immutable"},
		{name: "sandbox build: upload accepted", object: uploadBuild},
		{name: "sandbox build: import with credentials accepted", object: `
kind: SandboxImageBuild
spec: {imageRef: img-1, teamID: red, source: {import: {image: "ghcr.io/org/app:1", dockerConfigSecretRef: {name: creds}}}}`},
		{name: "sandbox build: no source refused", object: `
kind: SandboxImageBuild
spec: {imageRef: img-1, teamID: red, source: {}}`, wantPath: "spec.source", wantMsg: "exactly one of upload and import must be set"},
		{name: "sandbox build: both sources refused", object: `
kind: SandboxImageBuild
spec: {imageRef: img-1, teamID: red, source: {upload: {}, import: {image: "ghcr.io/org/app:1"}}}`,
			wantPath: "spec.source", wantMsg: "exactly one of upload and import must be set"},
		{name: "sandbox build: spec change refused", object: uploadBuild, update: `spec: {imageRef: img-2}`,
			wantPath: "spec", wantMsg: "a SandboxImageBuild is immutable"},
		// Chain and ChainDeployment.
		{name: "chain: valid object accepted", object: `
kind: Chain
spec: {environments: [{name: production, deployment: v1}, {name: staging}], development: v2}`},
		{name: "chain: no production environment refused", object: `
kind: Chain
spec: {environments: [{name: staging, deployment: v1}]}`,
			wantPath: "spec.environments", wantMsg: "a production environment is required"},
		{name: "chain: development as an environment refused", object: `
kind: Chain
spec: {environments: [{name: production}, {name: development, deployment: v1}]}`,
			wantPath: "spec.environments", wantMsg: "development is not an environment"},
		{name: "chain: duplicate environment names refused", object: `
kind: Chain
spec: {environments: [{name: production}, {name: production, deployment: v1}]}`,
			wantPath: "spec.environments[1]", wantMsg: "Duplicate value"},
		{name: "chain deployment: valid object accepted", object: chainDeployment},
		{name: "chain deployment: entrypoint that is not a chainlet refused", object: `
kind: ChainDeployment
spec: {chainID: pipe, entrypoint: middle, chainlets: [{name: front, source: {url: "https://x.example.com"}}]}`,
			wantPath: "spec.entrypoint", wantMsg: "entrypoint must name one of spec.chainlets"},
		{name: "chain deployment: duplicate chainlet names refused", object: `
kind: ChainDeployment
spec: {chainID: pipe, entrypoint: front, chainlets: [{name: front, source: {url: "https://x.example.com"}}, {name: front, source: {url: "https://y.example.com"}}]}`,
			wantPath: "spec.chainlets[1]", wantMsg: "Duplicate value"},
		{name: "chain deployment: chainlet with two sources refused", object: `
kind: ChainDeployment
spec: {chainID: pipe, entrypoint: front, chainlets: [{name: front, source: {url: "https://x.example.com", service: {name: s, port: 80}}}]}`,
			wantPath: "spec.chainlets[0].source", wantMsg: "exactly one of container, service and url must be set"},
		{name: "chain deployment: chainID change refused", object: chainDeployment,
			update: `spec: {chainID: other}`, wantPath: "spec.chainID", wantMsg: "chainID is immutable"},
		{name: "chain deployment: entrypoint change refused", object: chainDeployment,
			update: `spec: {entrypoint: back}`, wantPath: "spec.entrypoint", wantMsg: "entrypoint is immutable"},
		{name: "chain deployment: chainlet source change refused", object: chainDeployment,
			update:   `spec: {chainlets: [{name: front, source: {container: {image: "registry.example.com/front:2", port: 9000}}}, {name: back, source: {url: "https://back.example.com"}}]}`,
			wantPath: "spec.chainlets[0].source", wantMsg: "a chainlet's source is immutable"},
		{name: "chain deployment: adding a chainlet refused", object: chainDeployment,
			update:   `spec: {chainlets: [{name: front, source: {container: {image: "registry.example.com/front:1", port: 9000}}}, {name: back, source: {url: "https://back.example.com"}}, {name: extra, source: {url: "https://extra.example.com"}}]}`,
			wantPath: "spec.chainlets", wantMsg: "chainlets cannot be added, removed or reordered"},
		{name: "chain deployment: autoscaling change accepted", object: chainDeployment,
			update: `spec: {chainlets: [{name: front, source: {container: {image: "registry.example.com/front:1", port: 9000}}, autoscaling: {minReplica: 1, maxReplica: 4}}, {name: back, source: {url: "https://back.example.com"}}]}`},
	}

	ctx := context.Background()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := parse(t, tc.object)
			obj.SetName(fmt.Sprintf("c%d", i))
			obj.SetNamespace(namespace)

			err := k8s.Create(ctx, obj)
			if tc.update != "" {
				if err != nil {
					t.Fatalf("create before the update was refused: %v", err)
				}
				patch, perr := yaml.YAMLToJSON([]byte(tc.update))
				if perr != nil {
					t.Fatalf("update is not YAML: %v", perr)
				}
				err = k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
			}
			check(t, err, tc.wantPath, tc.wantMsg)
		})
	}
}

// parse turns a case's YAML into an object of gateway.modelgate.io/v1alpha1.
func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("case object is not YAML: %v", err)
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatalf("case object is not an object: %v", err)
	}
	obj.SetAPIVersion("gateway.modelgate.io/v1alpha1")
	return obj
}

// check asserts that err is nil when wantPath is empty, and otherwise an Invalid refusal whose message names
// wantPath as the field in error and contains wantMsg.
func check(t *testing.T, err error, wantPath, wantMsg string) {
	t.Helper()
	if wantPath == "" {
		if err != nil {
			t.Fatalf("write refused, want it admitted: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("write admitted, want a refusal at %s: %q", wantPath, wantMsg)
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("want an Invalid status, got %v", err)
	}
	// Field errors render as "<path>: <kind>...", so "<path>:" pins the path exactly rather than a longer one.
	msg := err.Error()
	if !strings.Contains(msg, wantPath+": ") {
		t.Errorf("message does not name field %s: %s", wantPath, msg)
	}
	if !strings.Contains(msg, wantMsg) {
		t.Errorf("message does not contain %q: %s", wantMsg, msg)
	}
}
