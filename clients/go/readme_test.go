package leasehold_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks returns the README's ```go blocks.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(src), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// buildReadme writes the README's program, and its snippets wrapped in functions of the same
// package (so they are type-checked against this client too), into a module that uses this
// folder, and builds it. No network: the client needs nothing but the standard library.
func buildReadme(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var program string
	snippets := "package main\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\t\"log\"\n\t\"time\"\n\n" +
		"\tleasehold \"github.com/leasehold/leasehold/clients/go\"\n)\n\n" +
		"var _, _, _, _ = errors.New, fmt.Sprint, log.Print, time.Second\n"
	for i, b := range readmeBlocks(t) {
		switch {
		case strings.HasPrefix(b, "package main"):
			program = b
		case strings.HasPrefix(b, "import leasehold"):
		case strings.HasPrefix(b, "c := leasehold.New"):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(ctx context.Context, key string) {\n" + b + "_ = err\n}\n"
		case strings.Contains(b, "c.WithLock("):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(ctx context.Context, c *leasehold.Client) error {\n" + b + "return err\n}\n"
		case strings.HasPrefix(b, "lease, err := c.Multilease("), strings.HasPrefix(b, "lease, err := c.Lock("):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(ctx context.Context, c *leasehold.Client, work func(context.Context) error) error {\n" + b + "}\n"
		case strings.HasPrefix(b, "term, err := c.Campaign("):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(ctx context.Context, c *leasehold.Client, addr string, lead func(context.Context, int64) error) error {\n" + b + "}\n"
		case strings.HasPrefix(b, "events, err := c.Observe("):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(ctx context.Context, c *leasehold.Client) error {\n" + b + "}\n"
		case strings.HasPrefix(b, "inLine := leasehold.CampaignOnInLine("):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "() leasehold.CampaignOption {\n" + b + "return inLine\n}\n"
		case strings.HasPrefix(b, "o := leasehold.LockOptions{"):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "() leasehold.LockOptions {\n" + b + "return o\n}\n"
		case strings.HasPrefix(b, "var p *leasehold.Problem"):
			snippets += "\nfunc snippet" + strconv.Itoa(i) + "(err error) {\n" + b + "}\n"
		default:
			t.Fatalf("README go block %d is neither the program nor a known snippet: teach readme_test.go about it:\n%s", i, b)
		}
	}
	if program == "" {
		t.Fatal("no README block starts with `package main`")
	}
	gomod := "module quickstart\n\ngo 1.19\n\nrequire github.com/leasehold/leasehold/clients/go v0.1.0\n\n" +
		"replace github.com/leasehold/leasehold/clients/go => " + here + "\n"
	for name, content := range map[string]string{"go.mod": gomod, "main.go": program, "snippets.go": snippets} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "quickstart")
	cmd := exec.Command(goTool(), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the README's program: %v\n%s", err, out)
	}
	return bin
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

type run struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

func startQuickstart(t *testing.T, bin string) *run {
	t.Helper()
	r := &run{cmd: exec.Command(bin), done: make(chan error, 1)}
	r.cmd.Env = append(os.Environ(), "LEASEHOLD_SERVER="+serverURL(t), "LEASEHOLD_API_KEY=")
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

func (r *run) wait(t *testing.T, d time.Duration) (exitCode int) {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("the quickstart did not exit within %v; stdout %q stderr %q", d, r.stdout.String(), r.stderr.String())
	}
	return -1
}

func TestReadmeQuickstart(t *testing.T) {
	serverURL(t)
	c, ctx := newClient(t), context.Background()
	const name = "nightly-report" // the README's
	bin := buildReadme(t)
	held := func() bool { return inspect(t, c, name).Held }

	// As written: takes the lock, works, releases, exits 0.
	r := startQuickstart(t, bin)
	if code := r.wait(t, 20*time.Second); code != 0 || !strings.Contains(r.stdout.String(), "fencing token") {
		t.Fatalf("quickstart: exit %d, stdout %q, stderr %q", code, r.stdout.String(), r.stderr.String())
	}
	if held() {
		t.Fatal("the quickstart left the lock held")
	}

	// Lost while it works: its work is told at once, and it says so (exit 1).
	r = startQuickstart(t, bin)
	waitFor(t, 10*time.Second, "the quickstart holding the lock", held)
	if _, err := adminClient(t).ForceRelease(ctx, name, "readme test"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := r.wait(t, 2*time.Second)
	if code != 1 || !strings.Contains(r.stderr.String(), "lost (force_released)") {
		t.Fatalf("after a force release: exit %d, stderr %q", code, r.stderr.String())
	}
	t.Logf("the quickstart stopped %v after the force release: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr.String()))

	// SIGTERM while it works: the work stops, the deferred Release gives the lock back.
	r = startQuickstart(t, bin)
	waitFor(t, 10*time.Second, "the quickstart holding the lock", held)
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.wait(t, 2*time.Second)
	if held() {
		t.Fatalf("SIGTERM left the lock held; stderr %q", r.stderr.String())
	}
}
