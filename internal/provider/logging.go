package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
)

// tfLogger writes a runtime service's log lines through tflog, so they
// appear under TF_LOG with their structured fields.
type tfLogger struct{ ctx context.Context }

// loggerFor returns the logger a runtime service gets for one request.
func loggerFor(ctx context.Context) logging.Logger { return tfLogger{ctx: ctx} }

func (l tfLogger) Trace(msg string, args ...any) { tflog.Trace(l.ctx, msg, logging.Fields(args)) }
func (l tfLogger) Debug(msg string, args ...any) { tflog.Debug(l.ctx, msg, logging.Fields(args)) }
func (l tfLogger) Info(msg string, args ...any)  { tflog.Info(l.ctx, msg, logging.Fields(args)) }
func (l tfLogger) Warn(msg string, args ...any)  { tflog.Warn(l.ctx, msg, logging.Fields(args)) }
func (l tfLogger) Error(msg string, args ...any) { tflog.Error(l.ctx, msg, logging.Fields(args)) }
