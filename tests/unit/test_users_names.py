"""`inferload.users` keeps its public names in one list (its ``__all__``); each resolves, when first
used, to the class or function of that name in `inferload.users.classes`."""

from __future__ import annotations

import inferload.users


def test_every_public_name_of_the_users_package_resolves_to_what_it_names() -> None:
    for name in inferload.users.__all__:
        value = getattr(inferload.users, name)
        assert value.__name__ == name
        assert value.__module__.startswith("inferload.users."), (name, value.__module__)
