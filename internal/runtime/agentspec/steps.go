package agentspec

// Steps of an agent's lifecycle, named in a fault.StepError. A backend may add
// steps of its own.
const (
	StepToken           = "token"
	StepListen          = "listen"
	StepDocker          = "docker"
	StepRuntime         = "runtime"
	StepThreegate       = "threegate"
	StepAsk             = "threegate ask"
	StepWorkspace       = "workspace"
	StepFiles           = "runner files"
	StepConfig          = "runner config"
	StepDeploy          = "runner deploy"
	StepHealth          = "runner health"
	StepRemove          = "runner remove"
	StepRemoveFiles     = "runner files remove"
	StepRead            = "read"
	StepReadWorkspace   = "workspace read"
	StepRemoveWorkspace = "workspace remove"
	StepImport          = "import"
	StepList            = "list"
	StepSend            = "message"
)
