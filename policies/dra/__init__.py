"""Dynamic Resource Allocation (resource.k8s.io): its objects read into plain values
(:mod:`policies.dra.objects`, the ``v1`` shape and the ``v1beta1``/``v1beta2`` ones still
served) and device selectors evaluated as the scheduler does (:mod:`policies.dra.cel`)."""
