package sandbox

import (
	"os"
	"testing"
)

func TestMountTable(t *testing.T) {
	info := `22 1 0:20 / / rw,relatime - overlay overlay rw
30 22 0:30 / /data/rw rw,relatime - ext4 /dev/vda rw
31 30 0:31 / /data/rw/secret ro,nosuid,nodev,noexec - tmpfs tmpfs ro,size=4k,mode=555
32 30 0:20 /empty /data/rw/key\040file.txt ro,relatime - ext4 /dev/vda rw
33 30 0:32 / /data/rw/remounted ro - tmpfs tmpfs ro
34 30 0:33 / /data/rw/remounted rw - tmpfs tmpfs rw
`
	mounts := mountTable(info)
	for p, want := range map[string]bool{
		"/data/rw/secret": true, "/data/rw/key file.txt": true, "/data/rw": false,
		"/data/rw/remounted": false, // the topmost mount decides
		"/elsewhere":         false,
	} {
		if mounts[p].readOnly != want {
			t.Errorf("%s: read-only %v, want %v", p, mounts[p].readOnly, want)
		}
	}
}

func TestMountTableFSType(t *testing.T) {
	m := mountTable("31 30 0:31 / /d/secret ro,nosuid - tmpfs tmpfs ro\n40 30 0:9 / /d/opt ro shared:4 - ext4 /dev/vda ro\n")
	if m["/d/secret"].fsType != "tmpfs" || m["/d/opt"].fsType != "ext4" {
		t.Fatalf("fs types: %+v", m)
	}
}

// Only an empty read-only mount covers a deny: a read-only mount that
// holds something (the path's own read-only bind) does not.
func TestIsEmptyCover(t *testing.T) {
	dir := t.TempDir()
	full := dir + "/full"
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full+"/secret", []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := dir + "/empty"
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		m    mountEntry
		want bool
	}{
		{full, mountEntry{readOnly: true, fsType: "tmpfs"}, false},  // holds a file
		{full, mountEntry{readOnly: true, fsType: "ext4"}, false},   // a real directory
		{empty, mountEntry{readOnly: true, fsType: "ext4"}, true},   // the empty file
		{empty, mountEntry{readOnly: false, fsType: "ext4"}, false}, // writable
		{dir + "/none", mountEntry{readOnly: true, fsType: "tmpfs"}, false},
	} {
		if got := isEmptyCover(c.path, c.m); got != c.want {
			t.Errorf("isEmptyCover(%s, %+v) = %v, want %v", c.path, c.m, got, c.want)
		}
	}
}
