"""Code that runs on the managed hosts, shipped there by the roles as files of this package.

- :mod:`fabricops.hostside.roce_boot` -- ``fabricops-roce-qos``, the boot-time apply/verify program
  of the ``roce_host`` role (it reads the package's own knob table, :mod:`fabricops.hostqos`)
- :mod:`fabricops.monitor.collector` -- ``fabricops-collector`` of the ``fabric_monitor`` role
- :mod:`fabricops.hostside.ship` -- on the controller: which package files a host needs to run one
  of them (the ``fabricops.fabric.package_files`` filter)

Everything a host runs is stdlib-only Python and is never copied into the collection: the roles
copy these modules from the package installed on the controller into ``/usr/local/lib/fabricops``
and install a launcher (docs/roce.md, "Where the host-side code lives").
"""

#: The oldest Python the host-side modules run on: the oldest ansible-core 2.19 supports on managed
#: nodes (3.8; Ubuntu 20.04, RHEL 8 with python38/39). The launchers and the roles' preflight check it;
#: tests/unit/hostqos/test_host_python_floor.py keeps the shipped files to it (syntax, regex, runtime
#: generics) and replays a recorded apply/verify on every older interpreter it finds.
HOST_PYTHON = (3, 8)
