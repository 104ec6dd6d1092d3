package models

import (
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Names and labels of what a container source runs.
const (
	// LabelDeployment, on the pods, Deployment and Service of a container source, names the ModelDeployment.
	LabelDeployment = "gateway.modelgate.io/deployment"
	// annotationRetryNonce on the pod template restarts the pods when a retry bumps spec.retryNonce.
	annotationRetryNonce = "gateway.modelgate.io/retry-nonce"
)

// workloadLabels select the pods of one model deployment.
func workloadLabels(md *gatewayv1.ModelDeployment) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "modelgate-model",
		"app.kubernetes.io/managed-by": "modelgate",
		gatewayv1.LabelModel:           md.Spec.ModelID,
		LabelDeployment:                md.Name,
	}
}

// The probes of a model container. The startup probe runs every second until the server answers, for up to
// startupTimeoutSeconds: a call held at zero replicas waits for it, and the kubelet probes readiness at once when
// it succeeds, so its period is what a cold start waits past the server's own start (docs/decisions.md, "The
// startup probe runs every second"). Readiness, probed for the pod's whole life, runs every 5 s.
const (
	startupProbePeriod   = 1
	readinessProbePeriod = 5
)

// desiredDeployment is the Deployment of a container source with the given replicas. It is pure, so what the
// manager creates is unit-tested field by field.
func desiredDeployment(md *gatewayv1.ModelDeployment, replicas int32) (*appsv1.Deployment, error) {
	c := md.Spec.Source.Container
	labels := workloadLabels(md)
	resources, err := containerResources(c.Resources)
	if err != nil {
		return nil, err
	}
	env := make([]corev1.EnvVar, len(c.Env))
	for i, e := range c.Env {
		env[i] = corev1.EnvVar{Name: e.Name, Value: e.Value}
		if ref := e.SecretKeyRef; ref != nil {
			env[i].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}
		}
	}
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: md.Spec.ReadinessPath, Port: intstr.FromString(gatewayv1.ModelPortName)}},
			PeriodSeconds: period, TimeoutSeconds: min(period, 2), FailureThreshold: failures,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: md.WorkloadName(), Namespace: md.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(replicas),
			Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{LabelDeployment: md.Name}},
			ProgressDeadlineSeconds: ptr.To(md.Spec.StartupTimeoutSeconds),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels),
					Annotations: map[string]string{annotationRetryNonce: fmt.Sprint(md.Spec.RetryNonce)}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "model", Image: c.Image, Command: c.Command, Args: c.Args, Env: env,
						Ports:          []corev1.ContainerPort{{Name: gatewayv1.ModelPortName, ContainerPort: c.Port, Protocol: corev1.ProtocolTCP}},
						Resources:      resources,
						StartupProbe:   probe(startupProbePeriod, max(1, md.Spec.StartupTimeoutSeconds/startupProbePeriod)),
						ReadinessProbe: probe(readinessProbePeriod, 3),
					}},
				},
			},
		},
	}, nil
}

// desiredService is the Service gatewayd routes to (through its EndpointSlices) for a container source.
func desiredService(md *gatewayv1.ModelDeployment) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: md.WorkloadName(), Namespace: md.Namespace, Labels: workloadLabels(md)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{LabelDeployment: md.Name},
			Ports: []corev1.ServicePort{{Name: gatewayv1.ModelPortName, Port: md.Spec.Source.Container.Port,
				TargetPort: intstr.FromString(gatewayv1.ModelPortName), Protocol: corev1.ProtocolTCP}},
		},
	}
}

func containerResources(r *gatewayv1.Resources) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	if r == nil {
		return out, nil
	}
	var err error
	if out.Requests, err = quantities("resources.requests", r.Requests); err != nil {
		return out, err
	}
	out.Limits, err = quantities("resources.limits", r.Limits)
	return out, err
}

func quantities(field string, in map[string]string) (corev1.ResourceList, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(corev1.ResourceList, len(in))
	for name, v := range in {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("spec.source.container.%s[%s]: %q is not a quantity", field, name, v)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}
