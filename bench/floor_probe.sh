#!/bin/sh
# The floor of a no-change host run (issue 21): one batched read, in one SSH round trip, of what
# site.yml's host phases read on a host to decide that nothing changes. bench/ansible_speed.py
# --floor runs it on every lab host at once and prints its wall and CPU time beside the runs.
#
# Each line stands for the reads of one role (the commands its tasks run, the sysfs files its
# modules read, the files its templates write, hashed instead of fetched); the output is thrown
# away: only the cost counts. A read a role makes twice (before and after a change) is here once.
exec >/dev/null 2>&1

# mlnx_ofed: installed stack, DKMS modules, kernels, openib.conf, the restart marker, boot id
ofed_info -s; dkms status; ls /boot/vmlinuz-*; cat /proc/sys/kernel/random/boot_id
sha256sum /etc/infiniband/openib.conf; ls /var/lib/fabricops; dpkg --get-selections mlnx-ofed-all
systemctl show --property=LoadState openibd.service; mokutil --sb-state; modinfo -F signer mlx5_core

# fabric_facts: every IB device's ports and every netdev (what the fact module reads from sysfs)
for p in /sys/class/infiniband/*/ports/*; do
  cat "$p/state" "$p/phys_state" "$p/rate" "$p/link_layer" "$p/lid" "$p/gids/0"
done
for n in /sys/class/net/*; do cat "$n/mtu" "$n/address" "$n/operstate" "$n/type" "$n/mode"; done

# nic_firmware: PCI addresses, firmware versions and each card's configuration
for d in /sys/class/infiniband/*; do
  pci=$(basename "$(readlink -f "$d/device")")
  mlxconfig -d "$pci" -e q
done
mlxfwmanager --query

# ipoib: live addresses, the connection files
ip -j addr; sha256sum /etc/network/interfaces.d/* /etc/NetworkManager/system-connections/*
systemctl show --property=SubState NetworkManager.service

# roce_host: QoS and the RoCE knobs of every RoCE port, rdma_cm defaults, the boot-time unit and files
for p in /sys/class/net/enp*; do
  n=$(basename "$p")
  mlnx_qos -i "$n"
  cat "/sys/class/net/$n/ecn/roce_np/enable/"* "/sys/class/net/$n/ecn/roce_rp/enable/"*
done
for p in /sys/class/infiniband/*; do
  d=$(basename "$p")
  cat "/sys/class/infiniband/$d/tc/1/traffic_class"; cma_roce_tos -d "$d" -p 1; cma_roce_mode -d "$d" -p 1
done
sha256sum /etc/fabricops/* /etc/systemd/system/fabricops-*.service /etc/systemd/system/nvidia-peermem.service \
  /usr/local/sbin/fabricops-* /usr/local/bin/fabricops-collector
find /usr/local/lib/fabricops -printf '%y %m %U %G %P\n' -type f -exec sha256sum {} +
/usr/local/sbin/fabricops-roce-qos verify
systemctl show --property=UnitFileState,ActiveState fabricops-roce-qos.service

# nccl_profile, gpudirect, fabric manager, monitoring: their files, modules, units and the GPUs
sha256sum /etc/nccl.conf /etc/profile.d/nccl.sh /etc/modules-load.d/* /etc/default/prometheus-node-exporter
lsmod; nvidia-smi -q; dpkg-query -W nvidia-fabricmanager-* prometheus-node-exporter
systemctl show --property=ActiveState nvidia-fabricmanager.service prometheus-node-exporter.service
find /usr/local/lib/fabricops -printf '%y %m %U %G %P\n' -type f -exec sha256sum {} +  # fabric_monitor's copy
exit 0
