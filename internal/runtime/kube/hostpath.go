package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostPathClaim makes a workspace claim on a single-node cluster without a
// storage provisioner (the project's test cluster): a hostPath
// PersistentVolume for dir, bound in advance to a claim of that name in
// c's namespace. It returns when the claim is bound, and a function that
// deletes both (the directory stays). dir must exist on the node and be
// writable by the sandbox user: no fsGroup change reaches a hostPath.
func HostPathClaim(ctx context.Context, c *Client, claim, dir string) (func(context.Context) error, error) {
	pvName := c.Namespace + "-" + claim
	size := resource.MustParse("1Gi")
	hostDir := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}},
		},
	}
	pvs := c.Clientset.CoreV1().PersistentVolumes()
	pvcs := c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace)
	remove := func(ctx context.Context) error {
		err := pvcs.Delete(ctx, claim, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		perr := pvs.Delete(ctx, pvName, metav1.DeleteOptions{})
		if apierrors.IsNotFound(perr) {
			perr = nil
		}
		return errors.Join(err, perr)
	}
	if _, err := pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("persistent volume %s: %w", pvName, err)
	}
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: c.Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if _, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return nil, errors.Join(fmt.Errorf("claim %s: %w", claim, err), remove(ctx))
	}
	for {
		got, err := pvcs.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("claim %s: %w", claim, err), remove(context.WithoutCancel(ctx)))
		}
		if got.Status.Phase == corev1.ClaimBound {
			return remove, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("claim %s not bound (%s): %w", claim, got.Status.Phase, ctx.Err()), remove(context.WithoutCancel(ctx)))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitDefaultServiceAccount waits until c's namespace has its "default"
// ServiceAccount: the API server refuses pods in a namespace whose
// account the controller manager has not made yet.
func WaitDefaultServiceAccount(ctx context.Context, c *Client) error {
	for {
		_, err := c.Clientset.CoreV1().ServiceAccounts(c.Namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("service account %s/default: %w", c.Namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service account %s/default: %w", c.Namespace, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
