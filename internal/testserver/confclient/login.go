package confclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Bounds of a login: the whole `mcpvisor login` (told to it, and
// enforced on it), and the browser's GET of the authorization URL with
// its redirects.
const (
	loginTimeout  = 15 * time.Second
	browseTimeout = 10 * time.Second
)

// maxLogins bounds the logins of one scenario, as a user who is asked to
// log in again and again gives up. It is above the three authorization
// requests the suite's scope-retry-limit scenario allows: keeping to
// those is mcpvisor's part (once a login did not get the server what it
// asks for, it must stop asking for another), not the user's.
const maxLogins = 5

// login runs `mcpvisor login s` against serve at addr, with this very
// binary (self) as its browser, and returns its error with its output.
func login(ctx context.Context, bin, self, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, loginTimeout+5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "login", "s", "--addr", addr, "--timeout", loginTimeout.String())
	cmd.Env = append(os.Environ(), "BROWSER="+self, BrowseEnv+"=1")
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mcpvisor login s: %w\n%s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Browse is the browser: it GETs the last of args, following redirects
// (the authorization server's approval to the login's loopback
// redirect_uri), writes where it ended to w, and returns the exit code.
func Browse(args []string, w io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(w, "browse: no URL")
		return 2
	}
	url := args[len(args)-1]
	ctx, cancel := context.WithTimeout(context.Background(), browseTimeout)
	defer cancel()
	end, status, err := browse(ctx, url)
	if err != nil {
		fmt.Fprintf(w, "browse: %v\n", err)
		return 1
	}
	fmt.Fprintf(w, "browse: %s answered %d\n", end, status)
	return 0
}

// browse GETs url with redirects followed and returns the last URL
// (without its query) and its status.
func browse(ctx context.Context, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	end := *resp.Request.URL
	end.RawQuery, end.User = "", nil // the code, the state
	return end.String(), resp.StatusCode, nil
}
