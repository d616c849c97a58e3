package agentspec

// Steps of an agent's lifecycle, named in a StepError. A backend may add
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

// StepError says which step of a backend's lifecycle failed, and the
// setting at fault when one is (in the config file's terms, e.g.
// "container_mode.runtime").
type StepError struct {
	Step  string
	Field string
	// What is the object the step worked on ("making the workspace /s/a").
	What string
	Err  error
}

func (e *StepError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }
