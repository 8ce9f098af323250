#!/bin/bash
#
# mlnx_add_kernel_support.sh -- the fabricops lab's emulation (docs/lab-ofed.md).
#
# Like NVIDIA's script it takes an MLNX_OFED_LINUX directory and makes an "-ext" copy whose kernel
# packages are built for another kernel (default: the running one). Here "building" rewrites the
# mlnx-ofed-kernel-modules package for that kernel; the rest of the tree is copied as is.

export LANG=C
PACKAGE=MLNX_OFED_LINUX

usage()
{
	cat <<EOF

	Usage: $(basename "$0") -m|--mlnx_ofed <path to MLNX_OFED directory> [--make-tgz]

		[--make-tgz]                    			Create MLNX_OFED tarball. (Default)
		[-t|--tmpdir <temp work dir>]                           Temp work directory (Default: /tmp)
		[-k | --kernel]	<kernel version>			Kernel version to use.
		[-s | --kernel-sources] <path to the kernel sources>	Path to kernel headers (ignored here).
		[-v|--verbose]
		[-n|--name]						Name of the package to be created.
		[-y|--yes]						Answer "yes" to all questions
		[--force]						Force removing packages that depends on MLNX_OFED
		[--skip-repo]						Do not create a repository from MLNX_OFED debs.
		[--without-<package>]					Do not build/install given package (or module).
		[--distro]						Set Distro name for the running OS. Default: Use auto-detection.

EOF
}

mlnx_ofed_dir=
kernel=${MLNXOFED_TEST_KERNEL:-$(uname -r)}
TMP=${TMPDIR:-/tmp}
tmp_given=0
yes=0
name=
distro=
verbose=0

while [ -n "$1" ]; do
	case "$1" in
	-h|--help) usage; exit 0 ;;
	-m|--mlnx_ofed) mlnx_ofed_dir=$2; shift ;;
	-k|--kernel) kernel=$2; shift ;;
	-s|--kernel-sources) shift ;;
	-t|--tmpdir) TMP=$2; tmp_given=1; shift ;;
	-v|--verbose) verbose=1 ;;
	--make-tgz) ;;
	--make-iso)
		echo "ERROR: --make-iso is not supported by the lab's emulated MLNX_OFED; use --make-tgz"
		exit 1
		;;
	-n|--name) name=$2; shift ;;
	-y|--yes) yes=1 ;;
	--force|--skip-repo|--kmp|--without-*) ;;
	--distro) distro=$(echo "$2" | tr '[:upper:]' '[:lower:]'); shift ;;
	*) usage; exit 1 ;;
	esac
	shift
done

if [ -z "$mlnx_ofed_dir" ]; then
	echo "ERROR: Path to MLNX_OFED directory is not defined."
	usage
	exit 1
fi
mnt_point=$(cd "$mlnx_ofed_dir" 2>/dev/null && pwd)
if [ -z "$mnt_point" ] || [ ! -f "$mnt_point/.mlnx" ]; then
	echo "ERROR: $mlnx_ofed_dir is not a supported $PACKAGE directory"
	exit 1
fi
mlnx_version=$(cat "$mnt_point/.mlnx")
MLNX_OFED_DISTRO=$(cat "$mnt_point/distro" 2>/dev/null)
[ -n "$distro" ] || distro=$MLNX_OFED_DISTRO
[ $tmp_given -eq 1 ] || TMP=$TMP/$PACKAGE-$mlnx_version-$kernel

pid=$$
logdir=$TMP/mlnx_iso.${pid}_logs
LOG=$logdir/mlnx_ofed_iso.$pid.log

echo "Note: This program will create $PACKAGE TGZ for $distro under $TMP directory."
if [ $yes -ne 1 ]; then
	printf "Do you want to continue?[y/N]:"
	read -r ans || ans=
	case "$ans" in
	y|Y) ;;
	*) exit 0 ;;
	esac
fi
mkdir -p "$logdir"
: > "$LOG"
echo "See log file $LOG"
echo

kernel_deb=${kernel//_/-}
if ls "$mnt_point"/DEBS/mlnx-ofed-kernel-modules_*kver."${kernel_deb}"_*.deb > /dev/null 2>&1; then
	echo "Required kernel ($kernel) is already supported by $PACKAGE"
	exit 30
fi

echo "Checking if all needed packages are installed..."
for tool in dpkg-deb tar gzip; do
	if ! command -v $tool > /dev/null 2>&1; then
		echo "ERROR: '$tool' is not installed!"
		exit 1
	fi
done

echo "Building $PACKAGE DEBS . Please wait..."
iso_dir=${name:-$PACKAGE-$mlnx_version-$MLNX_OFED_DISTRO-ext}
work=$TMP/mlnx_iso.$pid
rm -rf "$work"
mkdir -p "$work"
cp -a "$mnt_point" "$work/$iso_dir" >> "$LOG" 2>&1 || { echo "ERROR: Failed executing \"cp -a $mnt_point $work/$iso_dir\""; exit 1; }
chmod -R u+w "$work/$iso_dir"

orig=$(ls "$work/$iso_dir"/DEBS/mlnx-ofed-kernel-modules_*.deb 2>/dev/null | head -n 1)
if [ -z "$orig" ]; then
	echo "ERROR: mlnx-ofed-kernel-modules is missing from $mnt_point/DEBS"
	exit 1
fi
arch=$(dpkg-deb -f "$orig" Architecture)
old_ver=$(dpkg-deb -f "$orig" Version)
new_ver="${old_ver%%.kver.*}.kver.$kernel_deb"
pkgdir=$work/pkg
rm -rf "$pkgdir"
{
	dpkg-deb -R "$orig" "$pkgdir" &&
	sed -i "s/^Version: .*/Version: $new_ver/" "$pkgdir/DEBIAN/control" &&
	printf '%s\n' "$kernel" > "$pkgdir/usr/share/emulated-ofed/kernel" &&
	rm -f "$work/$iso_dir"/DEBS/mlnx-ofed-kernel-modules_*.deb &&
	dpkg-deb --root-owner-group -Zgzip -b "$pkgdir" \
		"$work/$iso_dir/DEBS/mlnx-ofed-kernel-modules_${new_ver}_${arch}.deb"
} >> "$LOG" 2>&1
if [ $? -ne 0 ]; then
	echo
	echo "ERROR: Failed executing \"dpkg-deb -b $pkgdir\""
	echo "ERROR: See $LOG"
	echo "Failed to build $PACKAGE for $kernel"
	exit 1
fi
rm -rf "$pkgdir"
if [ "X$distro" != "X$MLNX_OFED_DISTRO" ]; then
	echo "skip-distro-check" > "$work/$iso_dir/distro"
fi

tar -C "$work" -czf "$TMP/$iso_dir.tgz" "$iso_dir" >> "$LOG" 2>&1 || { echo "ERROR: See $LOG"; exit 1; }
rm -rf "$work"
echo "Created $TMP/$iso_dir.tgz"
exit 0
