"""The type of whoever a request comes from: a signed-in account or the anonymous visitor."""

from typing import TypeAlias

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

AnyUser: TypeAlias = AbstractBaseUser | AnonymousUser
