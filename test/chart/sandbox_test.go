package chart

import (
	"slices"
	"testing"

	"github.com/modelgate/modelgate/test/chart/helmtest"
)

// gatewayd.sandboxUploadKeySecret mounts the upload signing key and passes its file; without it nothing is mounted.
func TestSandboxUploadKey(t *testing.T) {
	objs := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace, "--set", "gatewayd.sandboxUploadKeySecret=upload-key"))
	c := container(t, objs, "modelgate-gatewayd")
	if !slices.Contains(c.Args, "--sandbox-upload-key-file=/etc/modelgate/sandbox-upload/key") {
		t.Errorf("gatewayd args %v lack the upload key file", c.Args)
	}
	pod := deployment(t, objs, "modelgate-gatewayd").Spec.Template.Spec
	v := volume(pod, "sandbox-upload-key")
	if v == nil || v.Secret == nil || v.Secret.SecretName != "upload-key" || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "key" {
		t.Errorf("upload key volume = %+v", v)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "sandbox-upload-key" && m.MountPath == "/etc/modelgate/sandbox-upload" && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("the upload key is not mounted read-only: %+v", c.VolumeMounts)
	}

	def := helmtest.Documents(t, helmtest.MustTemplate(t, release, namespace))
	if volume(deployment(t, def, "modelgate-gatewayd").Spec.Template.Spec, "sandbox-upload-key") != nil {
		t.Errorf("an upload key volume renders without gatewayd.sandboxUploadKeySecret")
	}
}
