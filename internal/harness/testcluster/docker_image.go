package testcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// testImageFiles are the build context of the one image every test
// container runs: PostgreSQL, MariaDB and Redis from Debian's packages
// (image/Dockerfile) and the servers' entrypoints.
//
//go:embed image
var testImageFiles embed.FS

// testImageContext is the build context (a tar of image/, every file
// executable but the Dockerfile) and a hash of its contents.
var testImageContext = sync.OnceValues(func() ([]byte, string) {
	entries, err := fs.ReadDir(testImageFiles, "image")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := sha256.New()
	for _, e := range entries { // sorted by name
		b, err := testImageFiles.ReadFile("image/" + e.Name())
		if err != nil {
			panic(err)
		}
		mode := int64(0o755)
		if e.Name() == "Dockerfile" {
			mode = 0o644
		}
		_ = tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: mode, Size: int64(len(b)), ModTime: time.Unix(0, 0)})
		_, _ = tw.Write(b)
		fmt.Fprintf(h, "%s %d %d\n", e.Name(), mode, len(b))
		h.Write(b)
	}
	_ = tw.Close()
	return buf.Bytes(), hex.EncodeToString(h.Sum(nil))[:12]
})

const (
	// testImageRepo is the repository of the built image; its tag is a
	// hash of the Dockerfile, so a changed Dockerfile builds a new image.
	testImageRepo = "freshread-testservers"
	// defaultBaseImage is the Dockerfile's BASE, pulled by a normal engine.
	defaultBaseImage = "debian:bookworm-slim"
	// OfflineBaseImage is the base scripts/make-base-image makes from
	// Debian's packages for an engine that cannot pull (debootstrap, then
	// docker import). When the default base is not present and this one
	// is, the image is built from it.
	OfflineBaseImage = "freshread/debian:bookworm"
)

// TestImageTag is the tag of the test image for these files.
func TestImageTag() string {
	_, sum := testImageContext()
	return testImageRepo + ":" + sum
}

var testImage struct {
	once sync.Once
	tag  string
	err  error
}

// ensureTestImage returns the test image's tag, building it once per
// process when the engine does not have it (several test processes
// building at once take turns through a lock file).
func ensureTestImage(ctx context.Context) (string, error) {
	testImage.once.Do(func() { testImage.tag, testImage.err = buildTestImage(ctx) })
	return testImage.tag, testImage.err
}

// BuildTestImage builds the test image if the engine does not have it and
// returns its tag (make images, .ci/run).
func BuildTestImage(ctx context.Context) (string, error) { return ensureTestImage(ctx) }

func buildTestImage(ctx context.Context) (string, error) {
	tag := TestImageTag()
	h, err := theHelper()
	if err != nil {
		return "", err
	}
	inspect := func(image string) error {
		_, err := h.call(ctx, helperRequest{Op: "image_inspect", Image: image}, nil)
		return err
	}
	unlock, err := lockFile(filepath.Join(os.TempDir(), "freshread-testimage.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := inspect(tag); err == nil {
		return tag, nil
	}
	base := defaultBaseImage
	if err := inspect(defaultBaseImage); err != nil {
		if err := inspect(OfflineBaseImage); err == nil {
			base = OfflineBaseImage
		}
	}
	tarball, _ := testImageContext()
	bctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(os.Stderr, "testcluster: building %s from %s (PostgreSQL, MariaDB and Redis from Debian's packages; about a minute on 2 cores)\n", tag, base)
	progress := newBuildProgress(os.Stderr, start)
	defer progress.stop()
	// The helper reads the engine's build output and sends its steps.
	if _, err := h.call(bctx, helperRequest{Op: "image_build", Build: &buildSpec{Tag: tag, Base: base, Context: tarball}}, progress.step); err != nil {
		return "", buildError(base, err)
	}
	if err := inspect(tag); err != nil {
		return "", buildError(base, fmt.Errorf("image %s missing after the build: %w", tag, err))
	}
	fmt.Fprintf(os.Stderr, "testcluster: built %s from %s in %s\n", tag, base, time.Since(start).Round(time.Second))
	return tag, nil
}

// buildError says what to do when the base cannot be pulled.
func buildError(base string, err error) error {
	hint := ""
	if base == defaultBaseImage {
		hint = fmt.Sprintf("; an engine that cannot pull %s needs a base made from Debian's packages first: sudo scripts/make-base-image (tags %s)", defaultBaseImage, OfflineBaseImage)
	}
	return fmt.Errorf("testcluster: build the test image %s from %s (%s=0 uses local binaries instead): %w%s", TestImageTag(), base, EnvDocker, err, hint)
}

// buildProgress prints a build's steps with the time since start, and,
// while a step runs, a line every 10 s, so that a build is never silent
// for long.
type buildProgress struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
	cur   string
	done  chan struct{}
}

func newBuildProgress(w io.Writer, start time.Time) *buildProgress {
	p := &buildProgress{w: w, start: start, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				if p.cur != "" {
					fmt.Fprintf(p.w, "testcluster:   ... still at %s (%s)\n", p.cur, time.Since(p.start).Round(time.Second))
				}
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// step records and prints the step the build is at.
func (p *buildProgress) step(line string) {
	if i := strings.Index(line, " : "); i > 0 {
		line = line[:i] + ": " + line[i+3:]
	}
	if len(line) > 100 {
		line = line[:100] + "..."
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, _, _ = strings.Cut(line, ":")
	fmt.Fprintf(p.w, "testcluster:   %s (%s)\n", line, time.Since(p.start).Round(time.Second))
}

func (p *buildProgress) stop() { close(p.done) }
