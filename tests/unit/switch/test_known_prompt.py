"""fabricops.switch.transport.known_prompt: show commands wait for the prompt the session learned at
login instead of asking for it again (netmiko's auto_find_prompt), unless the caller chose."""

from __future__ import annotations

from fabricops.switch.transport import known_prompt


class Recorder:
    def __init__(self):
        self.calls = []

    def send_command(self, command_string, *args, **kwargs):
        self.calls.append((command_string, args, kwargs))
        return f"out of {command_string}"


def test_a_plain_show_command_does_not_ask_for_the_prompt_first():
    conn = known_prompt(Recorder())
    assert conn.send_command("show qos | json-print") == "out of show qos | json-print"
    assert conn.calls == [("show qos | json-print", (), {"auto_find_prompt": False})]


def test_the_caller_s_choice_stands():
    conn = known_prompt(Recorder())
    conn.send_command("nv config apply", expect_string=r"\[y/N\]")  # a confirmation prompt
    conn.send_command("show version", auto_find_prompt=True, read_timeout=5)
    conn.send_command("show clock", r"#")  # expect_string given by position
    assert conn.calls == [
        ("nv config apply", (), {"expect_string": r"\[y/N\]"}),
        ("show version", (), {"auto_find_prompt": True, "read_timeout": 5}),
        ("show clock", ("#",), {}),
    ]
