#!/usr/bin/env bash
# build-guest.sh builds the interop guest: a Debian bookworm kernel, the siw module built out
# of tree from the matching linux-source, rdma_rxe, and an initramfs holding rdma-core's tools
# (ibverbs-utils, rdmacm-utils, perftest, iproute2's ip and rdma) plus the agent in guest/init.
#
# Everything is downloaded with `apt-get download` from the Debian archive and extracted with
# `dpkg -x`; nothing is installed on the host except the host tools listed in host_pkgs.
# Output (cached, rebuilt when this script, guest/init or the kernel version changes):
#   $CACHE/guest/vmlinuz  $CACHE/guest/initrd.img  $CACHE/guest/kernel-release
# Usage: build-guest.sh [--print-dir]   (SOFTRNIC_INTEROP_CACHE overrides the cache directory;
# SOFTRNIC_GUEST_KPKG pins the kernel, e.g. linux-image-6.1.0-56-amd64 or, from bookworm's
# 6.12 kernels, linux-image-6.12.117+deb12-amd64: give each kernel its own cache directory)
# Builds into one cache directory are serialized with flock on $CACHE/.build-guest.lock:
# two at once would clobber each other's work directory and outputs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${SOFTRNIC_INTEROP_CACHE:-$HERE/.cache}
OUT=$CACHE/guest
DEBS=$CACHE/debs
log() { echo "build-guest: $*" >&2; }
die() { echo "build-guest: FATAL: $*" >&2; exit 1; }

# Host tools we need; installed with apt-get when missing (CI runs as root on a fresh machine).
host_pkgs=(qemu-system-x86 qemu-utils iproute2 cpio kmod make gcc-12 libc6-dev binutils xz-utils gzip util-linux)
host_cmds=(qemu-system-x86_64 ip cpio depmod modinfo make gcc-12 readelf xz gzip dpkg-deb flock)
ensure_host_tools() {
	local missing=0 c
	for c in "${host_cmds[@]}"; do command -v "$c" >/dev/null 2>&1 || missing=1; done
	[ -e /usr/include/stdio.h ] || missing=1
	if [ $missing = 1 ]; then
		[ "$(id -u)" = 0 ] || die "host tools missing (${host_cmds[*]}) and not root to install them"
		log "installing host packages: ${host_pkgs[*]}"
		export DEBIAN_FRONTEND=noninteractive
		timeout 600 apt-get update -qq || die "apt-get update failed"
		timeout 900 apt-get install -y -qq --no-install-recommends "${host_pkgs[@]}" >/dev/null ||
			die "apt-get install ${host_pkgs[*]} failed"
	fi
	for c in "${host_cmds[@]}"; do command -v "$c" >/dev/null 2>&1 || die "missing host tool $c"; done
}

# Guest userspace packages (bookworm). Their shared-library closure is checked below.
guest_pkgs=(busybox-static dash iproute2 ibverbs-utils rdmacm-utils perftest ibverbs-providers
	libibverbs1 librdmacm1 libibumad3 libc6 libnl-3-200 libnl-route-3-200 libbpf1 libbsd0 libcap2
	libelf1 libmnl0 libpci3 libmd0 zlib1g libudev1 libzstd1 liblzma5 libgcc-s1 libxtables12
	dapl2-utils libdapl2)
# (dapl2-utils, libdapl2: OFA DAPL's dtest and its libdat2 + cma provider libdaplofa, for the
# uDAPL interop tests; the tests write their own dat.conf and point DAT_OVERRIDE at it.)
# (libgcc-s1: glibc dlopens libgcc_s for pthread_exit/cancellation, which rping uses.)
# Binaries kept in the guest (everything else from those packages is dropped).
guest_bins=(rping ucmatose udaddy rdma_server rdma_client ibv_devices ibv_devinfo ibv_asyncwatch ibv_rc_pingpong
	ibv_ud_pingpong ibv_srq_pingpong ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_bw
	ib_read_lat dtest ip rdma tc dash busybox)
# Kernel modules loaded in the guest (dependencies follow from modules.dep).
guest_mods=(virtio_pci virtio_net virtio_console configfs crc32c_generic libcrc32c crc32_generic crc32_pclmul crc32c_intel ib_core
	ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm rdma_rxe udp_tunnel ip6_udp_tunnel sch_netem sch_prio cls_u32)
# (tc with libxtables12, sch_netem, sch_prio, cls_u32: the impaired-link tests put netem on the
# guest's NICs.)

ensure_host_tools

kpkg=${SOFTRNIC_GUEST_KPKG:-}
if [ -z "$kpkg" ]; then
	if ! kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6\.1/{print $2; exit}') || [ -z "$kpkg" ]; then
		timeout 600 apt-get update -qq || die "apt-get update failed"
		kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-6\.1/{print $2; exit}')
	fi
fi
[ -n "$kpkg" ] || die "cannot resolve the bookworm 6.1 kernel package (is this a Debian bookworm host with apt?)"
krel=${kpkg#linux-image-}                       # e.g. 6.1.0-56-amd64
kver=$(apt-cache show "$kpkg" | awk '/^Version:/{print $2; exit}') # e.g. 6.1.192-2
[ -n "$kver" ] || die "no version for $kpkg"
kcommon=linux-headers-${krel%-amd64}-common
kmm=$(echo "$krel" | cut -d. -f1,2)             # 6.1 or 6.12: names the source package
# linux-kbuild-6.1 serves every 6.1 ABI; the 6.12 kernels have linux-kbuild-6.12.N+deb12.
kbuild=linux-kbuild-${krel%-amd64}
apt-cache show "$kbuild" >/dev/null 2>&1 || kbuild=linux-kbuild-$kmm
ksrc=linux-source-$kmm
# The security archive may already carry a newer build of the version-independent kbuild and
# source packages than of the image (bookworm-security in 2026-11: linux-kbuild-6.1 and
# linux-source-6.1 at 6.1.192-3 while the image was 6.1.192-2, and kbuild's -2 gone). Take the
# image's version where the archive has it, else the candidate: both serve every 6.1 ABI.
pick() { # pick pkg ver: ver if the archive has pkg at ver, else pkg's candidate version
	if apt-cache madison "$1" 2>/dev/null | awk -v v="$2" '$3 == v {f = 1} END {exit !f}'; then
		echo "$2"
	else
		apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2; exit}'
	fi
}
kbuildver=$(pick "$kbuild" "$kver")
ksrcver=$(pick "$ksrc" "$kver")
[ -n "$kbuildver" ] && [ "$kbuildver" != "(none)" ] || die "no version of $kbuild"
[ -n "$ksrcver" ] && [ "$ksrcver" != "(none)" ] || die "no version of $ksrc"

mkdir -p "$CACHE"
exec 9>"$CACHE/.build-guest.lock"
flock -w 1800 9 || die "another build-guest.sh has held $CACHE/.build-guest.lock for 30 minutes"

key=$( { cat "$0" "$HERE/guest/init"; echo "$kpkg $kver $kbuildver $ksrcver"; } | sha256sum | cut -d' ' -f1)
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$key" ] && [ -f "$OUT/initrd.img" ]; then
	log "cached guest $krel in $OUT"
	[ "${1:-}" = --print-dir ] && echo "$OUT"
	exit 0
fi
log "building guest: kernel $kpkg $kver"
t0=$(date +%s)

# --- download -------------------------------------------------------------------------------
mkdir -p "$DEBS"
dl() { # dl pkg[=ver]...: download into $DEBS unless a matching .deb is already there
	local want=() p name ver
	for p in "$@"; do
		name=${p%%=*}
		if [ "$name" = "$p" ]; then ver=$(apt-cache show "$name" 2>/dev/null | awk '/^Version:/{print $2; exit}'); else ver=${p#*=}; fi
		ver=${ver#*:}
		compgen -G "$DEBS/${name}_${ver//+/?}_*.deb" >/dev/null || compgen -G "$DEBS/${name}_*%3a${ver//+/?}_*.deb" >/dev/null || want+=("$p")
	done
	[ ${#want[@]} = 0 ] && return 0
	log "apt-get download ${want[*]}"
	(cd "$DEBS" && timeout 900 apt-get download -qq "${want[@]}" 2>&1 | { grep -v '^W: Download is performed unsandboxed' >&2 || true; }) ||
		die "apt-get download failed"
}
deb() { # deb name: path of the newest downloaded .deb of that package
	local f
	f=$(ls -1 "$DEBS/$1"_*.deb 2>/dev/null | sort -V | tail -1)
	[ -n "$f" ] || die "no .deb for $1"
	echo "$f"
}
dl "$kpkg=$kver" "linux-headers-$krel=$kver" "$kcommon=$kver" "$kbuild=$kbuildver" "$ksrc=$ksrcver"
dl "${guest_pkgs[@]}"

WORK=$CACHE/work
rm -rf "$WORK"
mkdir -p "$WORK"

# --- kernel and siw -------------------------------------------------------------------------
log "extracting kernel"
dpkg -x "$(ls -1 "$DEBS/${kpkg}_${kver//+/?}"_*.deb)" "$WORK/img"
for p in "linux-headers-$krel=$kver" "$kcommon=$kver" "$kbuild=$kbuildver"; do
	v=${p#*=}
	dpkg -x "$(ls -1 "$DEBS/${p%%=*}_${v//+/?}"_*.deb)" "$WORK/kroot"
done
hdr=$WORK/kroot/usr/src/linux-headers-$krel
# The headers Makefile includes the -common tree by absolute path; point it at our copy.
sed -i "s#^include /usr/src/#include $WORK/kroot/usr/src/#" "$hdr/Makefile"

log "extracting siw source from $ksrc $ksrcver"
mkdir -p "$WORK/src"
dpkg-deb --fsys-tarfile "$(ls -1 "$DEBS/${ksrc}_${ksrcver//+/?}"_all.deb)" |
	tar -x -O "./usr/src/$ksrc.tar.xz" | xz -dc |
	tar -x -C "$WORK/src" "$ksrc/drivers/infiniband/sw/siw"
siwsrc=$WORK/src/$ksrc/drivers/infiniband/sw/siw
log "building siw.ko out of tree"
timeout 600 make -s -C "$hdr" M="$siwsrc" CONFIG_RDMA_SIW=m CONFIG_DEBUG_INFO_BTF_MODULES= modules >"$WORK/siw-build.log" 2>&1 ||
	{ tail -30 "$WORK/siw-build.log" >&2; die "siw build failed"; }
vm=$(modinfo -F vermagic "$siwsrc/siw.ko")
case "$vm" in "$krel "*) ;; *) die "siw.ko vermagic '$vm' does not match $krel" ;; esac

# --- initramfs root -------------------------------------------------------------------------
R=$WORK/root
mkdir -p "$R"
log "extracting guest userspace"
for p in "${guest_pkgs[@]}"; do dpkg -x "$(deb "$p")" "$WORK/pkgs"; done
# Merge /bin /sbin /lib /lib64 into /usr like a usrmerged system.
for d in bin sbin lib lib64; do
	if [ -d "$WORK/pkgs/$d" ] && [ ! -L "$WORK/pkgs/$d" ]; then
		mkdir -p "$WORK/pkgs/usr/$d"
		cp -a "$WORK/pkgs/$d/." "$WORK/pkgs/usr/$d/"
		rm -rf "${WORK:?}/pkgs/$d"
	fi
done
mkdir -p "$R/usr/bin" "$R/usr/lib/x86_64-linux-gnu" "$R/usr/lib64" "$R/etc" "$R/proc" "$R/sys" "$R/dev" "$R/tmp" "$R/run" "$R/root" "$R/var"
for d in bin sbin lib lib64; do ln -s usr/$d "$R/$d"; done
ln -s bin "$R/usr/sbin"
for b in "${guest_bins[@]}"; do
	f=$(find "$WORK/pkgs/usr/bin" "$WORK/pkgs/usr/sbin" -maxdepth 1 -name "$b" \( -type f -o -type l \) | head -1)
	[ -n "$f" ] || die "guest binary $b not found in the packages"
	cp -L "$f" "$R/usr/bin/$b"
done
# All shared libraries of those packages, the verbs providers and their config.
cp -a "$WORK/pkgs/usr/lib/x86_64-linux-gnu/." "$R/usr/lib/x86_64-linux-gnu/"
cp -a "$WORK/pkgs/usr/lib64/." "$R/usr/lib64/"
cp -a "$WORK/pkgs/etc/libibverbs.d" "$R/etc/"
cp -a "$WORK/pkgs/etc/rdma" "$R/etc/" 2>/dev/null || true
# Check the shared-library closure so a missing package fails here, not in the guest.
missing=""
for f in "$R"/usr/bin/* "$R"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$R"/usr/lib/x86_64-linux-gnu/*.so*; do
	[ -f "$f" ] || continue
	for l in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
		[ -e "$R/usr/lib/x86_64-linux-gnu/$l" ] || [ -e "$R/usr/lib64/$l" ] || missing="$missing $l(${f##*/})"
	done
done
[ -z "$missing" ] || die "guest libraries missing:$missing"
# busybox applets for whatever is not a real binary; /bin/sh is dash (busybox's own applets
# shadow PATH inside busybox sh).
ln -sf dash "$R/usr/bin/sh"
for a in $("$R/usr/bin/busybox" --list); do
	[ -e "$R/usr/bin/$a" ] || ln -s busybox "$R/usr/bin/$a"
done
echo "root:x:0:0:root:/root:/bin/sh" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
install -m 0755 "$HERE/guest/init" "$R/init"

# Modules: the closure of guest_mods plus siw, with a fresh modules.dep.
log "collecting modules"
MD=$WORK/img/lib/modules/$krel
depmod -b "$WORK/img" "$krel"
RM=$R/lib/modules/$krel
mkdir -p "$RM/extra"
cp "$MD/modules.builtin" "$MD/modules.order" "$MD/modules.builtin.modinfo" "$RM/"
# Debian's 6.12 kernels ship xz-compressed modules (.ko.xz); they are unpacked here, so
# busybox's modprobe in the guest loads plain .ko files for every kernel.
kx='\.ko(\.xz)?'
for m in "${guest_mods[@]}"; do
	if grep -qE "/($m|${m//_/-})$kx:" "$MD/modules.dep"; then
		line=$(grep -E "/($m|${m//_/-})$kx:" "$MD/modules.dep" | head -1)
		for k in ${line//:/}; do
			mkdir -p "$RM/$(dirname "$k")"
			cp "$MD/$k" "$RM/$k"
			case "$k" in *.xz) xz -df "$RM/$k" ;; esac
		done
	elif grep -qE "/($m|${m//_/-})\.ko$" "$MD/modules.builtin"; then
		:
	else
		die "module $m neither in modules.dep nor built in"
	fi
done
cp "$siwsrc/siw.ko" "$RM/extra/siw.ko"
depmod -b "$R" "$krel"
grep -q '^extra/siw.ko: .*ib_core' "$RM/modules.dep" || die "siw.ko dependencies not resolved"
echo "$krel" >"$R/etc/kernel-release"

# --- outputs --------------------------------------------------------------------------------
mkdir -p "$OUT"
cp "$WORK/img/boot/vmlinuz-$krel" "$OUT/vmlinuz.tmp"
(cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$OUT/initrd.img.tmp"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
mv "$OUT/initrd.img.tmp" "$OUT/initrd.img"
echo "$krel" >"$OUT/kernel-release"
echo "$key" >"$OUT/stamp"
rm -rf "$WORK"
log "guest built in $(($(date +%s) - t0)) s: $(du -h "$OUT/initrd.img" | cut -f1) initrd, kernel $krel"
[ "${1:-}" = --print-dir ] && echo "$OUT"
exit 0
