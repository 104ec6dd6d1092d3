package certs_test

import (
	"strings"
	"testing"

	"github.com/modelgate/modelgate/webhooks/certs"
)

func TestOptionsValidate(t *testing.T) {
	selfManaged := certs.Options{
		Mode:                             certs.ModeSelfManaged,
		CertDir:                          "/tmp/certs",
		Namespace:                        "modelgate-system",
		SecretName:                       "modelgate-webhook-server-cert",
		ServiceName:                      "modelgate-webhook",
		WebhookConfigurationName:         "modelgate-validating",
		MutatingWebhookConfigurationName: "modelgate-mutating",
	}
	with := func(edit func(*certs.Options)) certs.Options {
		o := selfManaged
		edit(&o)
		return o
	}
	tests := []struct {
		name    string
		opts    certs.Options
		wantErr string // a substring naming the flag and the rule; empty means valid
	}{
		{name: "self-managed with every name", opts: selfManaged},
		{name: "cert-manager needs only the cert dir", opts: certs.Options{Mode: certs.ModeCertManager, CertDir: "/tmp/certs"}},
		{name: "unknown mode", opts: with(func(o *certs.Options) { o.Mode = "vault" }),
			wantErr: `--webhook-cert-mode="vault" is not supported: use "self-managed" or "cert-manager"`},
		{name: "empty mode", opts: with(func(o *certs.Options) { o.Mode = "" }), wantErr: `--webhook-cert-mode="" is not supported`},
		{name: "cert-manager without cert dir", opts: certs.Options{Mode: certs.ModeCertManager},
			wantErr: "--webhook-cert-dir must not be empty"},
		{name: "self-managed without cert dir", opts: with(func(o *certs.Options) { o.CertDir = "" }),
			wantErr: "--webhook-cert-dir must not be empty"},
		{name: "missing POD_NAMESPACE", opts: with(func(o *certs.Options) { o.Namespace = "" }),
			wantErr: "POD_NAMESPACE (the manager's namespace) is required with --webhook-cert-mode=self-managed"},
		{name: "missing secret name", opts: with(func(o *certs.Options) { o.SecretName = "" }),
			wantErr: "--webhook-secret-name is required with --webhook-cert-mode=self-managed"},
		{name: "missing service name", opts: with(func(o *certs.Options) { o.ServiceName = "" }),
			wantErr: "--webhook-service-name is required with --webhook-cert-mode=self-managed"},
		{name: "missing configuration name", opts: with(func(o *certs.Options) { o.WebhookConfigurationName = "" }),
			wantErr: "--webhook-configuration-name is required with --webhook-cert-mode=self-managed"},
		{name: "missing mutating configuration name", opts: with(func(o *certs.Options) { o.MutatingWebhookConfigurationName = "" }),
			wantErr: "--mutating-webhook-configuration-name is required with --webhook-cert-mode=self-managed"},
		{name: "service name with a dot cannot form the DNS name", opts: with(func(o *certs.Options) { o.ServiceName = "a.b" }),
			wantErr: `--webhook-service-name="a.b" is not a valid Kubernetes name`},
		{name: "upper-case secret name", opts: with(func(o *certs.Options) { o.SecretName = "Certs" }),
			wantErr: `--webhook-secret-name="Certs" is not a valid Kubernetes name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestDNSName(t *testing.T) {
	o := certs.Options{Namespace: "modelgate-system", ServiceName: "modelgate-webhook"}
	if got, want := o.DNSName(), "modelgate-webhook.modelgate-system.svc"; got != want {
		t.Fatalf("DNSName() = %q, want %q", got, want)
	}
}
