"""Hand-written next-edit cases: Go (see scripts/build_curated_next_edit.py for the format)."""

FETCH_GO = '''package fetch

import (
	"fmt"
	"io"
	"net/http"
)

// Body returns the body of a GET request to url.
func Body(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
'''

SERVER_GO = '''package server

import (
	"net/http"
	"sync"
)

type Server struct {
	mu      sync.Mutex
	running bool
	srv     *http.Server
}

func (s *Server) Start(addr string, h http.Handler) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	s.srv = &http.Server{Addr: addr, Handler: h}
	s.running = true
	go s.srv.ListenAndServe()
	return nil
}

func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}
'''

KEYS_GO = '''package keys

import "strconv"

// Key builds a cache key from a prefix and numeric parts.
func Key(prefix string, parts ...int) string {
	buf := make([]byte, 0, 64)
	buf = append(buf, prefix...)
	for _, p := range parts {
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(p), 10)
	}
	return string(buf)
}

func Split(key string) []string {
	var out []string
	start := 0
	for i := 0; i < len(key); i++ {
		if key[i] == ':' {
			out = append(out, key[start:i])
			start = i + 1
		}
	}
	return append(out, key[start:])
}
'''

REPO_GO = '''package users

import (
	"context"
	"database/sql"
)

type User struct {
	ID   int64
	Name string
}

type Repo struct {
	db *sql.DB
}

func (r *Repo) Count(ctx context.Context) (int, error) {
	var n int
	err := r.db.QueryRowContext(ctx, "SELECT count(*) FROM users").Scan(&n)
	return n, err
}

func (r *Repo) List(limit int) ([]User, error) {
	rows, err := r.db.Query("SELECT id, name FROM users LIMIT ?", limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		var u User
		if err := rows.Scan(&u.ID, &u.Name); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
'''

LOAD_GO = '''package catalog

import (
	"encoding/json"
	"log"
	"os"
)

type Entry struct {
	SKU   string  `json:"sku"`
	Price float64 `json:"price"`
}

func Load(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, err
	}
	n := len(entries)
	log.Printf("catalog: loaded %d entries from %s", n, path)
	return entries, nil
}
'''

CONFIG_GO = '''package config

import "time"

// Config holds the server's settings.
type Config struct {
	Addr         string
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	Debug        bool
}

// Default returns the settings used when no file is given.
func Default() Config {
	return Config{
		Addr:         ":8080",
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 10 * time.Second,
	}
}
'''

MAIN_GO = '''package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"example.com/app/config"
)

func main() {
	addr := flag.String("addr", ":9000", "listen address")
	flag.Parse()
	cfg := config.Config{
		Addr:        *addr,
		ReadTimeout: 3 * time.Second,
	}
	srv := &http.Server{Addr: cfg.Addr, ReadTimeout: cfg.ReadTimeout}
	log.Fatal(srv.ListenAndServe())
}
'''

STATE_GO = '''package worker

import "fmt"

// State is a worker's lifecycle state.
type State int

const (
	StateIdle State = iota
	StateRunning
	StateStopped
)

type Worker struct {
	name  string
	state State
}

func New(name string) *Worker {
	return &Worker{name: name, state: StateIdle}
}

func (w *Worker) Start() error {
	if w.state == StateRunning {
		return fmt.Errorf("worker %s already running", w.name)
	}
	w.state = StateRunning
	return nil
}

func (w *Worker) Stop() {
	w.state = StateStopped
}

func (s State) String() string {
	switch s {
	case StateIdle:
		return "idle"
	case StateRunning:
		return "running"
	case StateStopped:
		return "stopped"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}
'''

CLIENT_GO = '''package api

import (
	"net/http"
	"time"
)

type Client struct {
	baseURL string
	token   string
}

func NewClient(baseURL, token string) *Client {
	return &Client{
		baseURL: baseURL,
		token:   token,
	}
}

func (c *Client) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+c.token)
	return http.DefaultClient.Do(req)
}
'''

ERRORS_GO = '''package parse

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

func Pair(s string) (int, int, error) {
	left, right, ok := strings.Cut(s, "=")
	if !ok {
		return 0, 0, errors.New(fmt.Sprintf("no '=' in %q", s))
	}
	k, err := strconv.Atoi(left)
	if err != nil {
		return 0, 0, errors.New(fmt.Sprintf("bad key %q", left))
	}
	v, err := strconv.Atoi(right)
	if err != nil {
		return 0, 0, errors.New(fmt.Sprintf("bad value %q", right))
	}
	if v < 0 {
		return 0, 0, errors.New(fmt.Sprintf("negative value %d", v))
	}
	return k, v, nil
}
'''

ROUTES_GO = '''package web

import "net/http"

type Server struct {
	mux *http.ServeMux
}

func (s *Server) routes() {
	s.mux.HandleFunc("/users", s.handleUsers)
	s.mux.HandleFunc("/health", s.handleHealth)
}

func (s *Server) handleUsers(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("users"))
}

func (s *Server) handleOrders(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("orders"))
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}
'''

RETRY_GO = '''package retry

import (
	"log"
	"time"
)

// Do calls fn until it succeeds or attempts run out, doubling the wait each time.
func Do(attempts int, wait time.Duration, fn func() error) error {
	var err error
	for i := 0; i < attempts; i++ {
		if err = fn(); err == nil {
			return nil
		}
		time.Sleep(wait)
		wait *= 2
	}
	log.Printf("retry: giving up after %d attempts", attempts)
	return err
}
'''

PERSON_GO = '''package people

import "strings"

type Person struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

func (p Person) Initials() string {
	var b strings.Builder
	for _, part := range strings.Fields(p.Name) {
		b.WriteByte(part[0])
	}
	return strings.ToUpper(b.String())
}

func Lookup(people []Person, name string) *Person {
	for i := range people {
		if strings.EqualFold(people[i].Email, name) {
			return &people[i]
		}
	}
	return nil
}
'''

LIMITS_GO = '''package limits

import "time"

const (
	maxRetries   = 3
	retryBackoff = 200 * time.Millisecond
	maxBodyBytes = 1 << 20
)

// Backoff returns the wait before the given retry, or false when retries are exhausted.
func Backoff(retry int) (time.Duration, bool) {
	if retry >= maxRetries {
		return 0, false
	}
	return retryBackoff * time.Duration(1<<retry), true
}
'''

CASES = [
    {
        "id": "go-below-rename-resp",
        "category": "next-edit/below",
        "language": "go",
        "files_before": {"fetch/fetch.go": FETCH_GO},
        "steps": [{"path": "fetch/fetch.go", "old": "\tresp, err := http.Get(url)", "new": "\tres, err := http.Get(url)"}],
        "cursor": {"path": "fetch/fetch.go", "after": "\tres"},
        "expected": [
            {"path": "fetch/fetch.go", "old": "\tdefer resp.Body.Close()", "new": "\tdefer res.Body.Close()"},
            {"path": "fetch/fetch.go", "old": "\tif resp.StatusCode", "new": "\tif res.StatusCode"},
            {"path": "fetch/fetch.go", "old": "url, resp.Status)", "new": "url, res.Status)"},
            {"path": "fetch/fetch.go", "old": "io.ReadAll(resp.Body)", "new": "io.ReadAll(res.Body)"},
        ],
        "note": "resp renamed to res; its remaining uses (the deferred Close, StatusCode, Status, ReadAll) are "
                "all in the region",
    },
    {
        "id": "go-below-rename-receiver",
        "category": "next-edit/below",
        "language": "go",
        "files_before": {"server/server.go": SERVER_GO},
        "steps": [{"path": "server/server.go", "old": "func (s *Server) Start(", "new": "func (srv *Server) Start("}],
        "cursor": {"path": "server/server.go", "after": "func (srv"},
        "expected": [
            {"path": "server/server.go", "old": "\ts.mu.Lock()", "new": "\tsrv.mu.Lock()", "occurrence": 1},
            {"path": "server/server.go", "old": "\tdefer s.mu.Unlock()",
             "new": "\tdefer srv.mu.Unlock()", "occurrence": 1},
            {"path": "server/server.go", "old": "\tif s.running {", "new": "\tif srv.running {"},
            {"path": "server/server.go", "old": "\ts.srv = &http.Server", "new": "\tsrv.srv = &http.Server"},
            {"path": "server/server.go", "old": "\ts.running = true", "new": "\tsrv.running = true"},
            {"path": "server/server.go", "old": "\tgo s.srv.ListenAndServe()",
             "new": "\tgo srv.srv.ListenAndServe()"},
        ],
        "note": "Start's receiver renamed s -> srv; its six uses in Start's body are all in the region (Running "
                "keeps its own s)",
    },
    {
        "id": "go-below-rename-buf",
        "category": "next-edit/below",
        "language": "go",
        "files_before": {"keys/keys.go": KEYS_GO},
        "steps": [{"path": "keys/keys.go", "old": "\tbuf := make([]byte, 0, 64)", "new": "\tkey := make([]byte, 0, 64)"}],
        "cursor": {"path": "keys/keys.go", "after": "\tkey"},
        "expected": [
            {"path": "keys/keys.go", "old": "\tbuf = append(buf, prefix...)",
             "new": "\tkey = append(key, prefix...)"},
            {"path": "keys/keys.go", "old": "\t\tbuf = append(buf, ':')",
             "new": "\t\tkey = append(key, ':')"},
            {"path": "keys/keys.go", "old": "\t\tbuf = strconv.AppendInt(buf,",
             "new": "\t\tkey = strconv.AppendInt(key,"},
            {"path": "keys/keys.go", "old": "\treturn string(buf)", "new": "\treturn string(key)"},
        ],
        "note": "buf renamed to key; its remaining uses (the prefix append, the loop's appends, the return) are "
                "all in the region (Split's key parameter is another function)",
    },
    {
        "id": "go-above-ctx-param",
        "category": "next-edit/above",
        "language": "go",
        "files_before": {"users/repo.go": REPO_GO},
        "steps": [{"path": "users/repo.go", "old": 'r.db.Query("SELECT id, name FROM users LIMIT ?", limit)',
                   "new": 'r.db.QueryContext(ctx, "SELECT id, name FROM users LIMIT ?", limit)'}],
        "cursor": {"path": "users/repo.go", "after": "QueryContext(ctx"},
        "expected": {"path": "users/repo.go", "old": "func (r *Repo) List(limit int) ([]User, error) {",
                     "new": "func (r *Repo) List(ctx context.Context, limit int) ([]User, error) {"},
        "note": "List now passes ctx, which it does not take; the signature on the line above gains "
                "ctx context.Context first, as Count has it (context is already imported)",
    },
    {
        "id": "go-above-rename-at-use",
        "category": "next-edit/above",
        "language": "go",
        "files_before": {"catalog/load.go": LOAD_GO},
        "steps": [{"path": "catalog/load.go", "old": "entries from %s\", n, path)", "new": "entries from %s\", count, path)"}],
        "cursor": {"path": "catalog/load.go", "after": "\", count"},
        "expected": {"path": "catalog/load.go", "old": "\tn := len(entries)", "new": "\tcount := len(entries)"},
        "note": "renamed at its use in the log line; the declaration on the line above still says n",
    },
    {
        "id": "go-jump-field-rename-literal",
        "category": "next-edit/jump",
        "language": "go",
        "files_before": {"config/config.go": CONFIG_GO, "main.go": MAIN_GO},
        "steps": [
            {"path": "config/config.go", "old": "\tAddr         string", "new": "\tListenAddr   string"},
            {"path": "config/config.go", "old": '\t\tAddr:         ":8080",', "new": '\t\tListenAddr:   ":8080",'},
        ],
        "cursor": {"path": "config/config.go", "after": "\t\tListenAddr"},
        "expected": {"path": "main.go", "old": "\t\tAddr:        *addr,", "new": "\t\tListenAddr:  *addr,"},
        "note": "field Addr renamed ListenAddr in its package (declaration and Default's literal); main.go's "
                "composite literal comes first in reading order (cfg.Addr after it), gofmt-aligned",
    },
    {
        "id": "go-jump-const-string-case",
        "category": "next-edit/jump",
        "language": "go",
        "files_before": {"worker/state.go": STATE_GO},
        "steps": [{"path": "worker/state.go", "old": "\tStateRunning\n", "new": "\tStateRunning\n\tStateDraining\n"}],
        "cursor": {"path": "worker/state.go", "after": "\tStateDraining"},
        "expected": {"path": "worker/state.go", "old": '\t\treturn "running"\n',
                     "new": '\t\treturn "running"\n\tcase StateDraining:\n\t\treturn "draining"\n'},
        "note": "a new iota state; String()'s switch about 30 lines below names every state, in order",
    },
    {
        "id": "go-complete-struct-literal-field",
        "category": "next-edit/complete",
        "language": "go",
        "files_before": {"api/client.go": CLIENT_GO},
        "steps": [
            {"path": "api/client.go", "old": "\ttoken   string\n}", "new": "\ttoken   string\n\ttimeout time.Duration\n}"},
            {"path": "api/client.go", "old": "func NewClient(baseURL, token string) *Client {",
             "new": "func NewClient(baseURL, token string, timeout time.Duration) *Client {"},
        ],
        "cursor": {"path": "api/client.go", "after": "timeout time.Duration)"},
        "expected": {"path": "api/client.go", "old": "\t\ttoken:   token,\n", "new": "\t\ttoken:   token,\n\t\ttimeout: timeout,\n"},
        "note": "a field and the constructor parameter for it added; the composite literal in NewClient does "
                "not set it yet",
    },
    {
        "id": "go-complete-errorf-pattern",
        "category": "next-edit/complete",
        "language": "go",
        "files_before": {"parse/pair.go": ERRORS_GO},
        "steps": [
            {"path": "parse/pair.go", "old": "errors.New(fmt.Sprintf(\"no '=' in %q\", s))", "new": "fmt.Errorf(\"no '=' in %q\", s)"},
            {"path": "parse/pair.go", "old": 'errors.New(fmt.Sprintf("bad key %q", left))', "new": 'fmt.Errorf("bad key %q", left)'},
        ],
        "expected": [
            {"path": "parse/pair.go", "old": 'errors.New(fmt.Sprintf("bad value %q", right))',
             "new": 'fmt.Errorf("bad value %q", right)'},
            {"path": "parse/pair.go", "old": 'errors.New(fmt.Sprintf("negative value %d", v))',
             "new": 'fmt.Errorf("negative value %d", v)'},
        ],
        "note": "two of four errors.New(fmt.Sprintf(...)) turned into fmt.Errorf; the other two (bad value, "
                "negative value) are in the region (the then unused errors import is outside it)",
    },
    {
        "id": "go-complete-pasted-route",
        "category": "next-edit/complete",
        "language": "go",
        "files_before": {"web/routes.go": ROUTES_GO},
        "steps": [
            {"path": "web/routes.go", "old": '\ts.mux.HandleFunc("/users", s.handleUsers)\n',
             "new": '\ts.mux.HandleFunc("/users", s.handleUsers)\n\ts.mux.HandleFunc("/users", s.handleUsers)\n'},
            {"path": "web/routes.go", "old": '"/users", s.handleUsers', "new": '"/orders", s.handleUsers', "occurrence": 2},
        ],
        "cursor": {"path": "web/routes.go", "after": '"/orders"'},
        "expected": {"path": "web/routes.go", "old": '"/orders", s.handleUsers', "new": '"/orders", s.handleOrders'},
        "note": "the users route pasted and its path changed to /orders; its handler must become "
                "handleOrders, which exists below and is not routed yet",
    },
    {
        "id": "go-noise-log-line",
        "category": "no-edit/noise",
        "language": "go",
        "files_before": {"retry/retry.go": RETRY_GO},
        "steps": [{"path": "retry/retry.go", "old": "\t\ttime.Sleep(wait)\n",
                   "new": "\t\tlog.Printf(\"retry: attempt %d failed: %v\", i+1, err)\n\t\ttime.Sleep(wait)\n"}],
        "cursor": {"path": "retry/retry.go", "after": "i+1, err)"},
        "expected": None,
        "note": "a log line added inside the loop (log is already imported); nothing follows",
    },
    {
        "id": "go-noise-field-rename-keeps-tag",
        "category": "no-edit/noise",
        "language": "go",
        "files_before": {"people/person.go": PERSON_GO},
        "steps": [
            {"path": "people/person.go", "old": '\tName  string `json:"name"`\n\tEmail string',
             "new": '\tFullName string `json:"name"`\n\tEmail    string'},
            {"path": "people/person.go", "old": "strings.Fields(p.Name)", "new": "strings.Fields(p.FullName)"},
        ],
        "cursor": {"path": "people/person.go", "after": "p.FullName"},
        "expected": None,
        "note": "Name renamed FullName at its only use; the JSON tag \"name\" keeps the wire format and Lookup's "
                "name parameter is unrelated (a naive rename rule would touch both)",
    },
    {
        "id": "go-noise-const-value",
        "category": "no-edit/noise",
        "language": "go",
        "files_before": {"limits/limits.go": LIMITS_GO},
        "steps": [{"path": "limits/limits.go", "old": "\tmaxRetries   = 3", "new": "\tmaxRetries   = 5"}],
        "expected": None,
        "note": "a constant's value changed; its uses read the constant",
    },
]
