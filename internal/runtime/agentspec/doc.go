// Package agentspec is an agent's contract, apart from the code that runs
// it: the config the runner reads (a file on a Docker host, a Secret on a
// cluster), the vocabulary an owner describes an agent in (LLM settings,
// ThreeGate roles, providers, the workspace seed), the defaults and bounds
// of every setting with ValidateSettings, the one check of them, and the
// Backend interface the two agent services implement (deploy on Docker,
// kubedeploy on a cluster) with its input (Agent), its results, the steps
// a fault.StepError names, and what both backends share (ConfigHash, the ask
// wait). deploy and kubedeploy each import this package and never each
// other.
//
// The Backend lives here rather than in a package of its own because it
// costs nothing: its types and helpers need only the standard library, so
// the runner, which reads this package for its config, gains no dependency
// by it, and an agent's contract stays in one place. What needs a Docker
// or Kubernetes client stays with the backend that has it.
//
// It imports no agent loop, no LLM SDK and no runner server, so the
// provider, which only describes agents, links none of them: the agent
// package keeps the loop and its model clients, the runner package the
// service that runs them.
package agentspec
