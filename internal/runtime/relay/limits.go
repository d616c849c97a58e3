package relay

import (
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/httpbound"
)

// relayLimits bound the relay's socket, which every process of a
// per-message container can reach (a tool as well as the loop): headers
// well above what the SDKs send, the request (agent.MaxRequestBytes at
// most, over a unix socket) within a minute, the answer taken within 30 s.
// A model call or an ask takes as long as its own timeout says. A refusal
// (a dead token above all) ends the connection.
var relayLimits = httpbound.Limits{
	MaxHeaderBytes: 32 << 10,
	ReadHeader:     10 * time.Second,
	Read:           60 * time.Second,
	Write:          30 * time.Second,
	Idle:           90 * time.Second,
	CloseOnRefusal: true,
}

// relayConns caps the relay socket's connections: the loop keeps a few,
// tools a few more; one message runs at a time.
const relayConns = 32

// relayConnLimits bound the relay's one connection of a host-mode message
// or a pod (ServeConn) as relayLimits do, except that it is never closed
// for idleness or a refusal: the loop has no second connection to dial,
// and the message's end closes it.
var relayConnLimits = func() httpbound.Limits {
	l := relayLimits
	l.Idle = -1
	l.CloseOnRefusal = false
	return l
}()
