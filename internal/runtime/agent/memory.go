package agent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // pure Go: the binary stays static (CGO_ENABLED=0)
)

// MemoryFile is the conversation memory's file name in the workspace.
const MemoryFile = "memory.db"

// historyMessages is how many earlier messages (user and assistant) of the
// conversation go to a real model with each new message.
const historyMessages = 12

// maxHistoryText bounds each history message sent back to the model.
const maxHistoryText = 8 << 10

// Memory is the conversation log in <workspace>/memory.db. The rollback
// journal lives in memory (journal_mode=MEMORY) and temporary tables too
// (temp_store=MEMORY): the sandbox's rootfs is read-only, /tmp is a small
// tmpfs, and nothing but the database itself should land in the workspace.
// The runner serializes messages per agent, so one writer at a time is the
// normal case; busy_timeout covers the rest.
type Memory struct {
	db *sql.DB
	// red scrubs every row before it is written (Prepared.Scrub).
	red *scrubber
}

// OpenMemory opens (creating when needed) the memory database in dir.
func OpenMemory(ctx context.Context, dir string) (*Memory, error) {
	db, err := sql.Open("sqlite", filepath.Join(dir, MemoryFile))
	if err != nil {
		return nil, fmt.Errorf("open memory: %w", err)
	}
	// PRAGMAs are per connection: keep exactly one.
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		"PRAGMA journal_mode=MEMORY",
		"PRAGMA temp_store=MEMORY",
		"PRAGMA busy_timeout=5000",
		`CREATE TABLE IF NOT EXISTS messages (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			conversation_id TEXT NOT NULL,
			message_id TEXT NOT NULL,
			role TEXT NOT NULL,
			text TEXT NOT NULL,
			created_at TEXT NOT NULL
		)`,
		"CREATE INDEX IF NOT EXISTS messages_conversation ON messages(conversation_id, id)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, errors.Join(fmt.Errorf("open memory: %s: %w", firstWords(stmt), err), db.Close())
		}
	}
	return &Memory{db: db}, nil
}

func firstWords(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

// Close closes the database.
func (m *Memory) Close() error { return m.db.Close() }

// History returns the last limit messages of a conversation, oldest first,
// as user and assistant chat messages.
func (m *Memory) History(ctx context.Context, conversation string, limit int) ([]ChatMessage, error) {
	rows, err := m.db.QueryContext(ctx,
		`SELECT role, text FROM (SELECT id, role, text FROM messages WHERE conversation_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id`,
		conversation, limit)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	defer func() { _ = rows.Close() }() // rows.Err below reports what matters
	var out []ChatMessage
	for rows.Next() {
		var cm ChatMessage
		if err := rows.Scan(&cm.Role, &cm.Text); err != nil {
			return nil, fmt.Errorf("read history: %w", err)
		}
		if len(cm.Text) > maxHistoryText {
			cm.Text = cm.Text[:maxHistoryText] + "\n[cut]"
		}
		out = append(out, cm)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	// A model API wants the history to start with a user turn.
	for len(out) > 0 && out[0].Role != RoleUser {
		out = out[1:]
	}
	return out, nil
}

// Append stores one exchange (the user's message and the reply) in one
// transaction, scrubbed of every known secret value whatever
// redact_secrets says: memory.db is in the workspace. An exchange that
// cannot be scrubbed is not stored.
func (m *Memory) Append(ctx context.Context, conversation, messageID, userText, replyText string) error {
	userText, err := m.red.String(ctx, userText)
	if err != nil {
		return fmt.Errorf("write memory: the message %w", err)
	}
	if replyText, err = m.red.String(ctx, replyText); err != nil {
		return fmt.Errorf("write memory: the reply %w", err)
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write memory: %w", err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, r := range [][2]string{{RoleUser, userText}, {RoleAssistant, replyText}} {
		if _, err := tx.ExecContext(ctx,
			"INSERT INTO messages (conversation_id, message_id, role, text, created_at) VALUES (?, ?, ?, ?, ?)",
			conversation, messageID, r[0], r[1], now); err != nil {
			return errors.Join(fmt.Errorf("write memory: %w", err), tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write memory: %w", err)
	}
	return nil
}
