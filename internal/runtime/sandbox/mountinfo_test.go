package sandbox

import "testing"

func TestReadOnlyMounts(t *testing.T) {
	info := `22 1 0:20 / / rw,relatime - overlay overlay rw
30 22 0:30 / /data/rw rw,relatime - ext4 /dev/vda rw
31 30 0:31 / /data/rw/secret ro,nosuid,nodev,noexec - tmpfs tmpfs ro,size=4k,mode=555
32 30 0:20 /empty /data/rw/key\040file.txt ro,relatime - ext4 /dev/vda rw
33 30 0:32 / /data/rw/remounted ro - tmpfs tmpfs ro
34 30 0:33 / /data/rw/remounted rw - tmpfs tmpfs rw
`
	ro := readOnlyMounts(info)
	for p, want := range map[string]bool{
		"/data/rw/secret": true, "/data/rw/key file.txt": true, "/data/rw": false,
		"/data/rw/remounted": false, // the topmost mount decides
		"/elsewhere":         false,
	} {
		if ro[p] != want {
			t.Errorf("%s: read-only %v, want %v", p, ro[p], want)
		}
	}
}
