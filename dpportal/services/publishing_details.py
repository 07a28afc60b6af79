"""What the public pages and packages of a dataset's releases say about who publishes them:
a title, the publisher, a contact and a note, set by the dataset's owner.

They are public words the owner types (never anything read from the data), shown on every
public page of the dataset's releases and in each package's report and README.txt from then
on (`dpportal.releases.packaging.context`).
"""

from django.db import transaction

from dpportal.models import Dataset
from dpportal.services.errors import ServiceError

FIELDS = ("publish_title", "publisher", "publish_contact", "publish_note")


def dataset_set_publishing(*, dataset, user, **details) -> Dataset:
    """Store the publishing details (`FIELDS`, each a text; missing ones become empty; line
    breaks are kept in the note only, as \\n). Only the dataset's owner may, and not once the
    dataset is deleted."""
    unknown = set(details) - set(FIELDS)
    if unknown:
        raise ServiceError(f"Unknown publishing details: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.owner_id != user.pk:
            raise ServiceError(
                "Only the dataset's owner can change how its releases are published."
            )
        if locked.is_deleted:
            raise ServiceError("This dataset was deleted, so its releases are no longer published.")
        for name in FIELDS:
            text = str(details.get(name) or "").replace("\r\n", "\n").strip()
            setattr(locked, name, text if name == "publish_note" else " ".join(text.split()))
        locked.save(update_fields=list(FIELDS))
    return locked
