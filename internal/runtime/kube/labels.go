package kube

// ThreeGateLabelRunner is "true" on the pod of an agent's runner (the
// Deployment's pod template), beside ThreeGateLabelTopology and
// ThreeGateLabelRole; per-message pods carry ThreeGateLabelExecution
// instead.
const ThreeGateLabelRunner = threegateLabelDomain + "threegate-runner"
