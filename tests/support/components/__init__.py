"""The stand-in for SageMaker's inference components and their Application Auto Scaling in
front of moto, by service: `server` (the HTTP front and the botocore-model check), `common`
(error shapes, ARNs, states, `State`), `endpoints` and `inference_components` (SageMaker),
`autoscaling` (Application Auto Scaling)."""
