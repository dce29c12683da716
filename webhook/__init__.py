"""The admission webhook front end: AdmissionReview in, AdmissionReview out."""
