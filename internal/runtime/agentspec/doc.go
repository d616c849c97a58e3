// Package agentspec is an agent's contract, apart from the code that runs
// it: the config the runner reads (a file on a Docker host, a Secret on a
// cluster), the vocabulary an owner describes an agent in (LLM settings,
// ThreeGate roles, providers, the workspace seed), the defaults and bounds
// of every setting with ValidateSettings, the one check of them, and the
// Backend interface the two agent services implement (deploy on Docker,
// kubedeploy on a cluster) with its results.
//
// It imports no agent loop, no LLM SDK and no runner server, so the
// provider, which only describes agents, links none of them: the agent
// package keeps the loop and its model clients, the runner package the
// service that runs them.
package agentspec
