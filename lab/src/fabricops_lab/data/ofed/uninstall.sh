#!/bin/bash
#
# uninstall.sh -- the fabricops lab's emulated MLNX_OFED uninstaller (docs/lab-ofed.md): removes
# (purges) every MLNX_OFED package this distribution installs. --force skips the question.
# Test hook: MLNXOFED_TEST_ROOT=DIR works on DIR like mlnxofedinstall does.

export LANG=C
PACKAGE=MLNX_OFED_LINUX
ROOT=${MLNXOFED_TEST_ROOT:-}
PACKAGES="mlnx-ofed-all mlnx-fw-updater mft opensm perftest infiniband-diags ibverbs-utils rdma-core
mlnx-ofed-kernel-modules mlnx-ofed-kernel-dkms mlnx-ofed-kernel-utils mlnx-tools ofed-scripts"

force=0
while [ $# -gt 0 ]; do
	case "$1" in
	--force|-f) force=1 ;;
	-h|--help)
		echo "Usage: $(basename "$0") [--force]"
		exit 0
		;;
	*)
		echo "Unsupported option: $1"
		exit 1
		;;
	esac
	shift
done

if [ -z "$ROOT" ] && [ "$(id -u)" -ne 0 ]; then
	echo "Only root can run $0"
	exit 1
fi

DPKG=(dpkg)
DPKG_QUERY=(dpkg-query)
if [ -n "$ROOT" ]; then
	DPKG=(dpkg --instdir="$ROOT" --admindir="$ROOT/var/lib/dpkg" --log="$ROOT/var/log/dpkg.log"
		--force-script-chrootless --force-not-root)
	DPKG_QUERY=(dpkg-query --admindir="$ROOT/var/lib/dpkg")
fi

if [ $force -eq 0 ]; then
	echo "This program will uninstall all $PACKAGE packages on your machine."
	printf "Do you want to continue?[y/N]:"
	read -r ans || ans=
	case "$ans" in
	y|Y|yes|YES) ;;
	*) exit 1 ;;
	esac
fi

LOG=${TMPDIR:-/tmp}/ofed.uninstall.log
: > "$LOG"
remove=()
for p in $PACKAGES; do
	if "${DPKG_QUERY[@]}" -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed\|config-files"; then
		remove+=("$p")
	fi
done
echo "Removing $PACKAGE Software installations"
if [ ${#remove[@]} -gt 0 ] && ! "${DPKG[@]}" --purge "${remove[@]}" >> "$LOG" 2>&1; then
	echo "Failed to uninstall the previous installation"
	echo "See log file: $LOG"
	exit 1
fi
echo "Uninstall finished successfully. See log file: $LOG"
exit 0
